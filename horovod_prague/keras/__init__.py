"""Horovod's Keras API (``horovod.tensorflow.keras``, tf-keras) with Prague's partial all-reduce.

``DistributedOptimizer`` applies each rank's own gradients, then averages the model within
groups; ``fit`` ends with a consensus; Horovod's global collectives (and the callbacks that
run them) first bring the model to consensus. Horovod's Keras wrappers need the Keras 2 API
(tf-keras): this package sets ``TF_USE_LEGACY_KERAS=1`` when imported before TensorFlow, and
refuses to load under Keras 3::

    import horovod_prague.keras as hvd

    hvd.init(strategy="smart")
    model.compile(optimizer=hvd.DistributedOptimizer(opt), loss=...)
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
"""

from __future__ import annotations

import os
import sys

if "tensorflow" not in sys.modules:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as _tf  # noqa: E402

KERAS3_ERROR = (
    "horovod_prague.keras (and Horovod's Keras wrappers) need tf-keras, but tf.keras is Keras 3 "
    "here: set TF_USE_LEGACY_KERAS=1 before TensorFlow is imported (in the environment, or "
    "first thing in the script), with the tf-keras package installed"
)
if not _tf.keras.optimizers.Optimizer.__module__.startswith("tf_keras"):
    raise ImportError(KERAS3_ERROR)

from horovod.tensorflow.keras import *  # noqa: E402,F403  (the whole Horovod Keras API)

from ..common.import_hook import KERAS_GLOBAL_COLLECTIVES, originals, patch_horovod  # noqa: E402
from ..tensorflow.binding import binding as _binding  # noqa: E402
from . import callbacks as callbacks  # noqa: E402
from .optimizer import DistributedOptimizer as DistributedOptimizer  # noqa: E402
from .optimizer import install_fit_consensus  # noqa: E402

globals().update(_binding.functions())  # init, partial_allreduce, ... (FUNCTIONS)
install_fit_consensus()
patch_horovod("horovod.tensorflow.keras.elastic")  # its run, bound from TensorFlow's at import
_hvd_keras = originals(sys.modules["horovod.tensorflow.keras"])
globals().update(
    {name: _binding.guard(getattr(_hvd_keras, name)) for name in KERAS_GLOBAL_COLLECTIVES}
)
