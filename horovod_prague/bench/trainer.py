"""What one framework says for a benchmark rank: the model, a step, and Horovod's calls."""

from __future__ import annotations

import abc
from typing import Any

import numpy as np

CONV_LAYERS = ((32, 5), (32, 3), (32, 3))
"""The CNN's 1-D convolutions, (channels, kernel), each with stride 2 and ReLU; then a
linear layer to the 10 classes."""


class Trainer(abc.ABC):
    """One framework's side of a benchmark rank."""

    prague_module: str
    """The Prague package the drop-in loads under ``--prague``."""
    hvd: Any
    """The framework's Horovod module, as the script imports it (the drop-in patches it)."""

    @abc.abstractmethod
    def __init__(
        self,
        data: dict[str, np.ndarray],
        params: int,
        lr: float,
        seed: int,
        batch: int,
        workload: str = "mnist1d",
    ) -> None:
        """``hvd.init()``, the workload's model and its wrapped optimizer, and rank 0's
        broadcast; ready for steps of ``batch`` examples (a traced step is traced here, before
        the clock)."""

    rank: int
    size: int
    poll_wait: bool = False
    """Wait for the stock optimizer's collectives by polling with sleeps (PyTorch only)."""

    def begin(self, steps: int) -> None:  # noqa: B027 (a schedule-less framework needs none)
        """Before the first step: this rank takes ``steps`` steps (a schedule's horizon)."""

    @abc.abstractmethod
    def step(self, batch: np.ndarray, weight: float = 1.0) -> float:
        """One training step on the examples ``batch``, its loss times ``weight``: local
        gradients, then the wrapper's. Returns the seconds it computed before waiting for
        other ranks (the whole step where the two cannot be told apart)."""

    @abc.abstractmethod
    def test(self) -> tuple[float, float]:
        """This rank's model on the test set, in one pass: its accuracy and its mean
        cross-entropy in nats."""

    @abc.abstractmethod
    def digest(self) -> str:
        """A hash of this rank's model parameters."""

    @abc.abstractmethod
    def barrier(self) -> None: ...

    @abc.abstractmethod
    def end(self) -> None:
        """The script's own global collective: under Prague, consensus runs first."""

    def allgather_object(self, value: Any, name: str) -> list[Any]:
        return self.hvd.allgather_object(value, name=name)

    def shutdown(self) -> None:
        self.hvd.shutdown()
