"""Horovod's PyTorch API with Prague's partial all-reduce.

Everything ``horovod.torch`` exports is here under the same name. ``init`` also takes the
Prague options, ``DistributedOptimizer`` averages the model within groups instead of
all-reducing gradients, and Horovod's global collectives first bring the model to consensus.
Four functions are added for explicit use::

    import horovod_prague.torch as hvd

    hvd.init(strategy="smart", group_size=2)
    for batch in loader:
        loss_fn(model(batch)).backward()
        opt.step()                                   # a plain torch optimizer: local step
        hvd.partial_allreduce(model.parameters(), hvd.next_group())
    hvd.finish(model)                                # leave, then the final global average

``average_model(model)`` makes every rank hold the same model at any point (all ranks call it).
``horovodrun --prague STRATEGY`` puts these in place of Horovod's for an unmodified script
(``horovod_prague.common.import_hook``).
"""

from __future__ import annotations

import importlib

from horovod.torch import *  # noqa: F403  (the whole Horovod API, re-exported)

from ..common.import_hook import (
    TORCH_GLOBAL_COLLECTIVES,
    TORCH_WAITING_MODULES,
    patch_horovod,
)
from .binding import _hvd
from .binding import binding as _binding
from .binding import synchronize as synchronize
from .epochs import end_epochs_with_consensus
from .optimizer import DistributedOptimizer as DistributedOptimizer
from .optimizer import broadcast_optimizer_state as _broadcast_optimizer_state
from .pace import pace_loaders

# Prague's elastic module; ``from . import elastic`` would find Horovod's, star-imported above.
elastic = importlib.import_module(f"{__name__}.elastic")

globals().update(_binding.functions())  # init, partial_allreduce, ... (FUNCTIONS)
globals().update({name: _binding.guard(getattr(_hvd, name)) for name in TORCH_GLOBAL_COLLECTIVES})
broadcast_optimizer_state = _binding.guard(_broadcast_optimizer_state)
patch_horovod(*TORCH_WAITING_MODULES)
end_epochs_with_consensus(_binding)
pace_loaders(_binding)


def join(device: int = -1) -> int:
    """Horovod's ``join`` for uneven data: this rank leaves the groups until every rank has
    joined, then all hold the same model (``Binding.join``). Returns the rank that joined last."""
    return _binding.join(lambda: _hvd.join(device))
