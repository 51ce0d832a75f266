"""``momentum_correction`` for tf-keras optimizers: the momentum takes its share of each group
average's move of a variable, as PyTorch's does (``horovod_prague.torch.optimizer``)."""

from __future__ import annotations

import weakref
from typing import Any

import tensorflow as tf

from ..common.config import share_at
from .binding import binding

SIGNS = {"SGD": 1.0, "RMSprop": -1.0}
"""tf-keras keeps momentum in the variable's units, the learning rate inside: SGD updates
``var += m`` and RMSprop ``var -= m``, so a move taken as a step adds ``share * move`` to
SGD's ``m`` and subtracts it from RMSprop's (PyTorch's buffers divide by the learning
rate instead)."""


class MomentumShare:
    """Makes one tf-keras SGD or RMSprop optimizer's momentum take ``momentum_correction``'s
    share of each group average's move of its variables (``Binding.follow_moves``).

    tf-keras's optimizers, current and legacy, and Keras 3's; ``of`` gives None for any
    other optimizer or one without momentum, which is then left alone::

        share = MomentumShare.of(optimizer)
        if share is not None:
            binding.follow_moves(share, optimizer)
    """

    def __init__(self, optimizer: Any, sign: float) -> None:
        self.optimizer = optimizer
        self.sign = sign

    @classmethod
    def of(cls, optimizer: Any) -> MomentumShare | None:
        """The follower for ``optimizer``, or None where there is no momentum to correct."""
        sign = next(
            (
                SIGNS[k.__name__]
                for k in type(optimizer).__mro__
                if k.__name__ in SIGNS and k.__module__.startswith(("tf_keras.", "keras."))
            ),
            None,
        )
        if sign is None:
            return None
        share = cls(optimizer, sign)
        return share if share.coefficient() > 0 else None

    def coefficient(self) -> float:
        """The optimizer's momentum coefficient (read eagerly, also while a function is
        traced: a legacy optimizer keeps it in a variable)."""
        with tf.init_scope():
            if _legacy(self.optimizer):
                value = self.optimizer._get_hyper("momentum")
                value = value() if callable(value) else value
                return float(value.numpy()) if hasattr(value, "numpy") else float(value)
            return float(self.optimizer.momentum)

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
        buffers = getattr(opt, "momentums" if self.sign > 0 else "_momentums", [])
        return None if index is None or index >= len(buffers) else buffers[index]

    def __call__(self, variable: tf.Variable, move: tf.Tensor, scale: float) -> None:
        """A group average added ``scale * move`` to ``variable``."""
        buffer = self.buffer(variable)
        if buffer is None:
            return
        share = share_at(binding.momentum_share(), self.coefficient())
        if share > 0:
            buffer.assign_add(tf.cast(move, buffer.dtype) * (self.sign * share * scale))


def _legacy(optimizer: Any) -> bool:
    """Whether ``optimizer`` is a legacy tf-keras one (``OptimizerV2``: slots, hypers)."""
    return hasattr(optimizer, "get_slot") and hasattr(optimizer, "_get_hyper")


_followed: weakref.WeakSet[Any] = weakref.WeakSet()


def follow_momentum(optimizer: Any) -> None:
    """Have ``optimizer``'s momentum take its share of the group averages' moves, once per
    optimizer; an explicit ``momentum_correction`` that finds no momentum to correct warns."""
    if optimizer in _followed:
        return
    _followed.add(optimizer)
    binding.follow_momentum(
        MomentumShare.of(optimizer), optimizer, type(optimizer).__name__, "Keras's SGD and RMSprop"
    )
