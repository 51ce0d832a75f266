"""Horovod's elastic API for TensorFlow and Keras (``horovod.tensorflow.elastic``, which
Keras's elastic runs), with Prague rebuilt on reset: as ``horovod_prague.torch.elastic``.

``run`` is Horovod's, except for what counts as a lost worker. Inside a ``tf.function`` (Keras
``fit``, a compiled custom step) a failed collective reaches the script as TensorFlow's
``UnknownError``; Horovod's ``run`` resets only when its message names a plain all-reduce,
allgather or broadcast op, and for any other ``UnknownError`` returns as if training had
ended. Prague's averages are grouped all-reduces, and its waits run in the step's
``py_function``: here those reset too, and any other error propagates.

    import horovod.tensorflow.keras as hvd

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)

    @hvd.elastic.run
    def train(state):
        model.fit(dataset, epochs=epochs - state.epoch, callbacks=[...])
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import tensorflow as tf
from horovod.common.elastic import run_fn
from horovod.common.exceptions import HorovodInternalError
from horovod.tensorflow.elastic import TensorFlowKerasState, TensorFlowState

from ..common.import_hook import patch_horovod
from ..common.stopped import process_set_dropped, says_a_rank_is_gone
from .binding import binding

__all__ = ["TensorFlowKerasState", "TensorFlowState", "run"]

_HOROVOD_OP = re.compile(r"Horovod(Grouped)?(Allreduce|Allgather|Broadcast|Alltoall|Reducescatter)")


def lost_worker(error: Exception) -> bool:
    """Whether TensorFlow's ``error`` from a step is a worker lost to the job: an
    ``UnknownError`` of a Horovod collective or of a Prague wait (a ``HorovodInternalError`` in
    the step's ``py_function``), or a process set that a shut-down Horovod no longer has. A
    wrong shape or type fails otherwise and is not one.

    >>> lost_worker(tf.errors.UnknownError(None, None, "Graph execution error: ... "
    ...     "HorovodInternalError: ConnectionError: rank 1: the Prague Group Generator ..."))
    True
    >>> lost_worker(tf.errors.UnknownError(None, None, "... [Op:HorovodGroupedAllreduce]"))
    True
    >>> lost_worker(tf.errors.UnknownError(None, None, "Graph execution error: NaN in loss"))
    False
    >>> lost_worker(tf.errors.FailedPreconditionError(None, None, "HorovodAllreduce: Mismatched"))
    False
    """
    message = getattr(error, "message", str(error))
    if isinstance(error, tf.errors.UnknownError):
        return (
            bool(_HOROVOD_OP.search(message))
            or says_a_rank_is_gone(error)
            or ("HorovodInternalError" in message)
        )
    return isinstance(error, tf.errors.InvalidArgumentError) and process_set_dropped(error)


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """``hvd.elastic.run``: ``func(state, ...)`` again from the last commit after a reset."""

    @functools.wraps(func)
    def step_errors_reset(state: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return func(state, *args, **kwargs)
        except (tf.errors.UnknownError, tf.errors.InvalidArgumentError) as e:
            if lost_worker(e):
                raise HorovodInternalError(e) from e
            raise

    return run_fn(step_errors_reset, _reset)


_reset = binding.reset
# Keras's elastic module binds TensorFlow's ``run`` when imported: the drop-in points it at
# ours on import, and ``horovod_prague.keras`` does so when imported itself.
patch_horovod("horovod.tensorflow.elastic")
