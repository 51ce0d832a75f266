"""A benchmark rank's batches as a plain PyTorch script takes them (``prague-bench --split fixed``).

Every rank iterates a ``DataLoader`` over a ``DistributedSampler`` (``set_epoch`` at each pass
under ``--sampling epoch``; never under ``shard``, so each rank keeps its part), and takes
the same number of batches: under ``--prague`` with ``own_pace=on`` Prague re-deals each pass,
as for any script. ``balanced=True`` is the answer a user of All-Reduce gives a slow machine
(``allreduce-balanced``): from the second pass on, each rank's share of the epoch follows its
speed measured over the pass before (``common.shares``, as own pace does), in the same number
of batches, and each rank's loss is weighted by its share, so that the all-reduced gradient
is the mean over samples::

    batches = ScriptBatches(trainer, examples=4000, sampling="epoch", seed=0, batch=64)
    for batch, weight in batches:
        batches.busy += trainer.step(batch, weight)   # the seconds it computed
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
from torch.utils.data import DataLoader, DistributedSampler

from ..common import shares
from .trainer import Trainer


class ScriptBatches:
    """The batches of a rank of ``trainer``'s job, and each one's loss weight."""

    def __init__(
        self,
        trainer: Trainer,
        examples: int,
        sampling: str,
        seed: int,
        batch: int,
        balanced: bool = False,
    ) -> None:
        if sampling not in ("epoch", "shard"):
            raise ValueError(f"a script's DistributedSampler gives epoch or shard, not {sampling}")
        self.trainer, self.sampling, self.balanced = trainer, sampling, balanced
        data = range(examples)
        self.sampler = DistributedSampler(
            data, num_replicas=trainer.size, rank=trainer.rank, seed=seed
        )
        self.loader = DataLoader(data, batch_size=batch, sampler=self.sampler)
        self.speeds: list[float] | None = None
        """Each rank's samples per busy second over the last pass (balanced only)."""
        self.busy = 0.0
        """Seconds this rank computed in the current pass: the caller adds each step's."""

    def __iter__(self) -> Iterator[tuple[np.ndarray, float]]:
        for epoch in itertools.count():
            if self.sampling == "epoch":
                self.sampler.set_epoch(epoch)
            self.busy, taken = 0.0, 0
            for batch, weight in self._one_pass():
                taken += len(batch)
                yield batch, weight
            if self.balanced:
                rows = self.trainer.allgather_object((taken, self.busy), name="bench.speeds")
                self.speeds = shares.speeds(rows)

    def _one_pass(self) -> Iterator[tuple[np.ndarray, float]]:
        if self.speeds is None:  # the sampler's equal split, through the DataLoader
            for batch in self.loader:
                yield batch.numpy(), 1.0
            return
        size = self.loader.batch_size
        mine, weight = shares.my_batches(self.sampler, self.speeds, len(self.loader), size)
        for batch in mine:
            yield np.asarray(batch), weight
