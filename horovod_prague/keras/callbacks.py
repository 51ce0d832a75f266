"""Horovod's Keras callbacks, made to work with tf-keras and Prague.

Those that run global collectives bring the model to consensus first, as the guarded
functions do (under the drop-in, Horovod's own callbacks reach the guarded
``horovod.tensorflow`` functions). Horovod 0.28 gives its callbacks Keras 3's backend, which
lacks ``constant``, ``get_value`` and ``set_value``; these use tf-keras' backend.
"""

from __future__ import annotations

from typing import Any

import tf_keras
from horovod.tensorflow.keras import callbacks as _callbacks
from horovod.tensorflow.keras.callbacks import *  # noqa: F403  (Horovod's callbacks)

from ..tensorflow.binding import binding


class BroadcastGlobalVariablesCallback(_callbacks.BroadcastGlobalVariablesCallback):
    """Horovod's: broadcast the variables from ``root_rank`` after the first batch."""

    def on_batch_end(self, batch: int, logs: Any = None) -> None:
        if not self.broadcast_done:
            binding._consensus_first()
        super().on_batch_end(batch, logs)


class MetricAverageCallback(_callbacks.MetricAverageCallback):
    """Horovod's: average the epoch's metrics over all ranks."""

    def __init__(self, device: str = "") -> None:
        super().__init__(device)
        self.backend = tf_keras.backend

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        binding._consensus_first()
        super().on_epoch_end(epoch, logs)


class LearningRateScheduleCallback(_callbacks.LearningRateScheduleCallback):
    """Horovod's: a learning rate that is a function of the epoch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.backend = tf_keras.backend


class LearningRateWarmupCallback(_callbacks.LearningRateWarmupCallback):
    """Horovod's: a gradual learning-rate warm-up over the first epochs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.backend = tf_keras.backend
