"""Horovod's elastic API for TensorFlow and Keras (``horovod.tensorflow.elastic``, which
Keras's elastic runs), with Prague rebuilt on reset: as ``horovod_prague.torch.elastic``."""

from __future__ import annotations

from horovod.tensorflow.elastic import TensorFlowKerasState, TensorFlowState, run

from ..common.elastic import patch_horovod
from .binding import binding

__all__ = ["TensorFlowKerasState", "TensorFlowState", "run"]

_reset = binding.reset
patch_horovod("horovod.tensorflow.elastic")
