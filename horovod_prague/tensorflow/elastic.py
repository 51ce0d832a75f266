"""Horovod's elastic API for TensorFlow and Keras (``horovod.tensorflow.elastic``, which
Keras's elastic runs), with Prague rebuilt on reset: as ``horovod_prague.torch.elastic``."""

from __future__ import annotations

from horovod.tensorflow.elastic import TensorFlowKerasState, TensorFlowState, run

from ..common.elastic import guarded, patch_horovod, reset_of
from .binding import binding

__all__ = ["TensorFlowKerasState", "TensorFlowState", "run"]

_reset = reset_of(binding)
broadcast_object = guarded("horovod_prague.tensorflow", "broadcast_object")
patch_horovod("horovod.tensorflow.elastic")
