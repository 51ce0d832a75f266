"""Horovod's elastic API for PyTorch (``horovod.torch.elastic``), with Prague rebuilt on reset.

``hvd.elastic.run`` resets after a worker was lost or the hosts changed; under Prague its reset
initializes Horovod and Prague again for the new world (``Binding.reset``), and a state's
``commit``, which broadcasts whether hosts changed (a global collective), runs behind the
guard, so no rank in it leaves a partner waiting in a group. ``run`` is Horovod's; this module
points Horovod's own names at Prague's, as the drop-in does.

    import horovod_prague.torch as hvd

    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, epoch=0)

    @hvd.elastic.run
    def train(state): ...
"""

from __future__ import annotations

from horovod.torch.elastic import ElasticSampler, TorchState, run

from ..common.import_hook import patch_horovod
from .binding import binding

__all__ = ["ElasticSampler", "TorchState", "run"]

_reset = binding.reset
patch_horovod("horovod.torch.elastic", "horovod.torch.elastic.state")
