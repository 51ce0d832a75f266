"""Horovod's Keras callbacks, with consensus before the global collectives they run.

``BroadcastGlobalVariablesCallback`` and ``MetricAverageCallback`` bring the model to
consensus first, as the guarded functions do. (Under the drop-in, Horovod's own callbacks
reach the guarded ``horovod.tensorflow`` functions instead.) The learning-rate callbacks run
no collective and are Horovod's own.
"""

from __future__ import annotations

from typing import Any

from horovod.tensorflow.keras import callbacks as _callbacks
from horovod.tensorflow.keras.callbacks import *  # noqa: F403  (Horovod's callbacks)

from ..tensorflow.binding import binding


class BroadcastGlobalVariablesCallback(_callbacks.BroadcastGlobalVariablesCallback):
    """Horovod's: broadcast the variables from ``root_rank`` after the first batch."""

    def on_batch_end(self, batch: int, logs: Any = None) -> None:
        if not self.broadcast_done:
            binding.flushed_before(None)
        super().on_batch_end(batch, logs)


class MetricAverageCallback(_callbacks.MetricAverageCallback):
    """Horovod's: average the epoch's metrics over all ranks."""

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        binding.flushed_before(None)
        super().on_epoch_end(epoch, logs)
