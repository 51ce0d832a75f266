"""Keras ``DistributedOptimizer`` for ``model.fit``: local step, then the group average.

The wrapped optimizer's ``apply_gradients`` (called by ``fit``'s traced train step) applies
the rank's own gradients, then averages the variables with the group the Group Generator
gives (``horovod_prague.tensorflow.optimizer``). ``fit``'s validation starts, and ``fit``
itself ends, with a consensus when the model's optimizer is one of these, so the model
validated, evaluated or saved after ``fit`` is the average of all ranks'
(``install_fit_consensus``).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import tf_keras

from ..tensorflow.binding import _hvd, binding
from ..tensorflow.optimizer import _PragueOptimizer, check_arguments, wrap_optimizer


def DistributedOptimizer(  # noqa: N802  (Horovod's name)
    optimizer: Any,
    name: str | None = None,
    device_dense: str = "",
    device_sparse: str = "",
    compression: Any = _hvd.Compression.none,
    sparse_as_dense: bool = False,
    gradient_predivide_factor: float = 1.0,
    op: Any = _hvd.Average,
    backward_passes_per_step: int = 1,
    average_aggregated_gradients: bool = False,
    num_groups: int = 0,
    groups: Any = None,
    process_set: Any = _hvd.global_process_set,
    scale_local_gradients: bool = True,
    *,
    model: Any = None,
    sync_every: int | None = None,
) -> Any:
    """Wrap a tf-keras optimizer: local step, then group average (Horovod's signature).

    ``model``: its other variables (BatchNorm statistics) are averaged too; by default only
    the variables the optimizer updates. ``sync_every``: None or the job's
    ``--prague-sync-every`` (else ValueError), whose global average the Group Generator makes.
    """
    if op not in (_hvd.Average, _hvd.Sum):
        raise ValueError("op currently only supports Average and Sum")
    check_arguments(
        op, gradient_predivide_factor, num_groups, groups, backward_passes_per_step, compression
    )
    passes = (backward_passes_per_step, average_aggregated_gradients)
    return wrap_optimizer(optimizer, process_set, model, sync_every, *passes)


def _every_rank_validates(arguments: dict[str, Any]) -> bool:
    """Whether ``fit`` (called with ``arguments``) validates, at the same epochs, on every
    rank, with ``epoch_consensus`` on: asked of all ranks in one global collective, as a
    script may give validation data to rank 0 alone, which stock Horovod runs."""
    if binding.config().epoch_consensus != "on":
        return False
    from .. import tensorflow as hvd_prague  # the guarded collectives; imported late: a cycle

    validates = arguments.get("validation_data") is not None or bool(
        arguments.get("validation_split", 0.0)
    )
    mine = (validates, repr(arguments.get("validation_freq", 1)))
    every = hvd_prague.allgather_object(mine, name="prague.fit_validation")
    return validates and all(other == mine for other in every)


def install_fit_consensus() -> None:
    """Make ``tf_keras.Model.fit`` end with a consensus when its optimizer is Prague's, and,
    with ``epoch_consensus`` on, run one before each validation ``fit`` makes.

    Every rank calls ``fit`` alike, so the consensus is collective like ``fit``'s own. Where
    every rank validates at the same epochs (``_every_rank_validates``), each validation then
    evaluates one model on every rank, as stock Horovod's would.
    """
    fit = tf_keras.Model.fit
    if getattr(fit, "__prague__", False):
        return
    evaluate = tf_keras.Model.evaluate

    fit_arguments = inspect.signature(fit)

    @functools.wraps(fit)
    def fit_then_consensus(self: Any, *args: Any, **kwargs: Any) -> Any:
        prague = isinstance(getattr(self, "optimizer", None), _PragueOptimizer)
        self._prague_validates = prague and _every_rank_validates(
            fit_arguments.bind(self, *args, **kwargs).arguments
        )
        try:
            history = fit(self, *args, **kwargs)
        finally:
            self._prague_validates = False
        if prague:
            binding.flush()
            binding.consensus()
        return history

    @functools.wraps(evaluate)
    def consensus_then_evaluate(self: Any, *args: Any, **kwargs: Any) -> Any:
        # fit's own validation passes this private keyword (tf_keras's Model.fit); an
        # evaluate that a callback calls, perhaps on one rank only, does not.
        if getattr(self, "_prague_validates", False) and kwargs.get(
            "_use_cached_eval_dataset", False
        ):
            binding.flushed_before(None)
        return evaluate(self, *args, **kwargs)

    fit_then_consensus.__prague__ = True  # type: ignore[attr-defined]
    tf_keras.Model.fit = fit_then_consensus
    tf_keras.Model.evaluate = consensus_then_evaluate
