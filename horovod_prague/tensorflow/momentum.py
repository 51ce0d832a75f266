"""``momentum_correction`` for tf-keras optimizers: the momentum takes its share of each group
average's move of a variable, as PyTorch's does (``horovod_prague.torch.optimizer``)."""

from __future__ import annotations

import weakref
from typing import Any, NamedTuple

import tensorflow as tf

from ..common.config import share_at
from .binding import binding


class Momentum(NamedTuple):
    """Where a Keras optimizer class keeps its momentum, and how a move enters it."""

    sign: float
    buffers: str
    """The attribute listing the buffers, by variable index (legacy optimizers: slots)."""


KINDS = {"SGD": Momentum(1.0, "momentums"), "RMSprop": Momentum(-1.0, "_momentums")}
"""Keras keeps momentum in the variable's units, the learning rate inside: SGD updates
``var += m`` and RMSprop ``var -= m``, so a move taken as a step adds ``share * move`` to
SGD's ``m`` and subtracts it from RMSprop's (PyTorch's buffers divide by the learning
rate instead)."""


class MomentumShare:
    """Makes one Keras SGD or RMSprop optimizer's momentum take ``momentum_correction``'s
    share of each group average's move of its variables (``TrackedModels.follow``).

    tf-keras's optimizers, current and legacy (wrapped in a ``LossScaleOptimizer`` or not);
    ``of`` gives None for any other optimizer or one without momentum, which is then left
    alone. ``follow_momentum`` registers it::

        follow_momentum(optimizer)  # DistributedOptimizer and the tape's hook do this
    """

    def __init__(self, optimizer: Any, kind: Momentum, coefficient: float) -> None:
        self.optimizer = optimizer
        self.kind = kind
        self.coefficient = coefficient
        """The momentum coefficient, read when the optimizer is first followed."""

    @classmethod
    def of(cls, optimizer: Any) -> MomentumShare | None:
        """The follower for ``optimizer``, or None where there is no momentum to correct."""
        inner = getattr(optimizer, "inner_optimizer", None)  # a LossScaleOptimizer's
        if inner is not None:
            return cls.of(inner)
        kind = next(
            (
                KINDS[k.__name__]
                for k in type(optimizer).__mro__
                if k.__name__ in KINDS and k.__module__.startswith(("tf_keras.", "keras."))
            ),
            None,
        )
        if kind is None:
            return None
        coefficient = _coefficient(optimizer)
        return cls(optimizer, kind, coefficient) if coefficient > 0 else None

    def buffer(self, variable: tf.Variable) -> tf.Variable | None:
        """The momentum of ``variable`` (None until the first step makes it, or for a
        variable the optimizer does not update)."""
        opt = self.optimizer
        if _legacy(opt):
            try:
                return opt.get_slot(variable, "momentum")
            except KeyError:
                return None
        if hasattr(opt, "_get_variable_index"):  # Keras 3
            try:
                index = opt._get_variable_index(variable)
            except KeyError:
                return None
        else:
            index = getattr(opt, "_index_dict", {}).get(opt._var_key(variable))
        buffers = getattr(opt, self.kind.buffers, [])
        return None if index is None or index >= len(buffers) else buffers[index]

    def __call__(self, variable: tf.Variable, move: tf.Tensor, scale: float) -> None:
        """A group average added ``scale * move`` to ``variable``."""
        buffer = self.buffer(variable)
        if buffer is None:
            return
        share = share_at(binding.config().momentum_share(), self.coefficient)
        if share > 0:
            buffer.assign_add(tf.cast(move, buffer.dtype) * (self.kind.sign * share * scale))


def _coefficient(optimizer: Any) -> float:
    """The optimizer's momentum coefficient, read eagerly (also while a function is traced)
    and without making a legacy optimizer create its hyperparameter variables early."""
    if not _legacy(optimizer):
        return float(optimizer.momentum)
    value = optimizer._hyper.get("momentum", 0.0)
    if callable(value) and not hasattr(value, "numpy"):  # set as a function of nothing
        value = value()
    with tf.init_scope():
        return float(value.numpy()) if hasattr(value, "numpy") else float(value)


def _legacy(optimizer: Any) -> bool:
    """Whether ``optimizer`` is a legacy tf-keras one (``OptimizerV2``: slots, hypers)."""
    return hasattr(optimizer, "get_slot") and hasattr(optimizer, "_hyper")


_followed: weakref.WeakSet[Any] = weakref.WeakSet()


def follow_momentum(optimizer: Any, stacklevel: int = 1) -> None:
    """Have ``optimizer``'s momentum take its share of the group averages' moves, once per
    optimizer object. A ``DistributedOptimizer`` of an optimizer already wrapped replaces the
    earlier wrapper's follower (``prague_wrapped``): both share the optimizer's buffers.
    ``stacklevel``: as ``warnings.warn`` would count it in the caller, for the warning that
    an explicit ``momentum_correction`` finds no momentum to correct."""
    if optimizer in _followed:
        return
    _followed.add(optimizer)
    binding.models.follow_momentum(
        binding.config(),
        MomentumShare.of(optimizer),
        getattr(optimizer, PRAGUE_WRAPPED, optimizer),
        type(optimizer).__name__,
        "Keras's SGD and RMSprop",
        stacklevel + 1,
    )


PRAGUE_WRAPPED = "_prague_wrapped"
"""The attribute of a ``DistributedOptimizer`` that holds the optimizer it wraps."""
