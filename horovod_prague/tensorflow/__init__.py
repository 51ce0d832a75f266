"""Horovod's TensorFlow API with Prague's partial all-reduce.

Everything ``horovod.tensorflow`` exports is here under the same name. ``init`` also takes the
Prague options; ``DistributedOptimizer`` and ``DistributedGradientTape`` keep gradients local
and average the variables within groups instead of all-reducing gradients; Horovod's global
collectives first bring the model to consensus. For explicit use::

    import horovod_prague.tensorflow as hvd

    hvd.init(strategy="smart")
    ...apply the local gradient...
    hvd.partial_allreduce(model.variables, hvd.next_group())
    hvd.finish(model)                    # leave, then the final global average

The group is decided at run time by the Group Generator: inside a ``tf.function`` the
wrappers stage their Prague step as a ``tf.py_function``; ``partial_allreduce``,
``next_group``, ``average_model`` and ``finish`` must run eagerly.
"""

from __future__ import annotations

import importlib
from typing import Any

import tensorflow as _tf
from horovod.tensorflow import *  # noqa: F403  (the whole Horovod API, re-exported)

from ..common.import_hook import TF_GLOBAL_COLLECTIVES
from .binding import _hvd
from .binding import binding as _binding
from .optimizer import DistributedGradientTape as DistributedGradientTape
from .optimizer import DistributedOptimizer as DistributedOptimizer

# Prague's elastic module; ``from . import elastic`` would find Horovod's, star-imported above.
elastic = importlib.import_module(f"{__name__}.elastic")

globals().update(_binding.functions())  # init, partial_allreduce, ... (FUNCTIONS)
globals().update({name: _binding.guard(getattr(_hvd, name)) for name in TF_GLOBAL_COLLECTIVES})


def join() -> Any:
    """Horovod's ``join`` for uneven data: this rank leaves the groups until every rank has
    joined, then all hold the same model (``Binding.join``). Eager only under Prague: the
    Group Generator decides at run time. Returns the rank that joined last, as a tensor."""
    if not _tf.executing_eagerly():
        raise RuntimeError(
            "hvd.join() under Prague must run eagerly, not inside a tf.function: it leaves "
            "the Group Generator's groups and averages the model once every rank has joined"
        )
    return _binding.join(_hvd.join)
