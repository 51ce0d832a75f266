"""Horovod's elastic API for TensorFlow and Keras (``horovod.tensorflow.elastic``, which
Keras's elastic runs), with Prague rebuilt on reset: as ``horovod_prague.torch.elastic``.

``run`` is Horovod's, except for what counts as a lost worker. Inside a ``tf.function`` (Keras
``fit``, a compiled custom step) a failed collective reaches the script as TensorFlow's
``UnknownError``; Horovod's ``run`` resets only when its message names a plain all-reduce,
allgather or broadcast op, and for any other returns as if training had ended. Prague's
averages are grouped all-reduces, and its waits run in the step's ``py_function``: here those
reset too, and any other error propagates.

    import horovod.tensorflow.keras as hvd

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)

    @hvd.elastic.run
    def train(state):
        model.fit(dataset, epochs=epochs - state.epoch, callbacks=[...])
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from horovod.common.elastic import run_fn
from horovod.common.exceptions import HorovodInternalError
from horovod.tensorflow.elastic import TensorFlowKerasState, TensorFlowState

from ..common.elastic import patch_horovod
from .binding import binding

__all__ = ["TensorFlowKerasState", "TensorFlowState", "run"]

LOST_WORKER_SIGNS = (
    "HorovodAllreduce",
    "HorovodGroupedAllreduce",
    "HorovodAllgather",
    "HorovodBroadcast",
    "HorovodInternalError",
    "Horovod has been shut down",
)
"""What a TensorFlow error from a step says when a worker was lost: a Horovod op's name, or
the error of a Prague wait that failed inside the step."""


def lost_worker(error: Exception) -> bool:
    """Whether TensorFlow's ``error`` is a collective that failed because a worker was lost.

    >>> import tensorflow as tf
    >>> lost_worker(tf.errors.UnknownError(None, None, "Graph execution error: ... "
    ...     "HorovodInternalError: ConnectionError: rank 1: the Prague Group Generator ..."))
    True
    >>> lost_worker(tf.errors.UnknownError(None, None, "Graph execution error: NaN in loss"))
    False
    """
    message = getattr(error, "message", str(error))
    return any(sign in message for sign in LOST_WORKER_SIGNS)


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """``hvd.elastic.run``: ``func(state, ...)`` again from the last commit after a reset."""
    import tensorflow as tf

    @functools.wraps(func)
    def step_errors_reset(state: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return func(state, *args, **kwargs)
        except tf.errors.OpError as e:
            if lost_worker(e):
                raise HorovodInternalError(e) from e
            raise

    return run_fn(step_errors_reset, _reset)


_reset = binding.reset
patch_horovod("horovod.tensorflow.elastic")  # Keras's: by horovod_prague.keras, or on import
