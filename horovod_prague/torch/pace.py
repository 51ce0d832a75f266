"""Own pace: each rank takes a share of a training epoch's samples that follows its speed.

A plain script gives every rank the same part of each epoch (``DistributedSampler``), so a
rank on a slow host takes as long over its part as it would under All-Reduce, and the epoch
ends when it is done. Under ``own_pace=on`` a training pass over a ``DistributedSampler`` of
every rank splits the epoch's samples (the same ones, in the sampler's own order) in
proportion to each rank's speed, measured over the previous pass, in the **same number of
batches on every rank**: a fast rank's batches are larger, a slow rank's smaller. So a
scheduler stepped per batch, ``len(loader)`` and the end of the epoch are where the script
expects them; every sample is seen once per epoch; and each model's weight in its averages
follows the samples it has taken (``StepStats.progress``).

The first pass of a loader runs the sampler's equal split, and measures. At the end of each
training pass (``epochs``), the ranks sum what each took and how long it was busy
(the pass's wall time less the time spent with other ranks: in Prague's steps, the script's
collectives and the consensus before them), and every rank derives
the same shares for the next pass::

    import horovod.torch as hvd         # horovodrun --prague --prague-own-pace on
    sampler = DistributedSampler(data, num_replicas=hvd.size(), rank=hvd.rank())
    loader = DataLoader(data, batch_size=32, sampler=sampler)   # unchanged
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:             # from the second pass on, len(x) follows the speed
            ...
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from typing import Any

import torch
from horovod.torch import Sum
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, Sampler

from ..common import shares
from ..common.binding import Binding

SPEEDS = "_prague_speeds"
"""The sampler's attribute that holds each rank's measured speed (samples per busy second)."""


class OwnPaceBatches:
    """A loader's batches under own pace: its ``BatchSampler``'s until the ranks' speeds are
    known, then this rank's share of the epoch in as many batches as that gives."""

    def __init__(self, batches: BatchSampler, binding: Binding) -> None:
        self.batch_sampler = batches
        self.sampler: DistributedSampler = batches.sampler  # type: ignore[assignment]
        self.binding = binding
        self.taken = 0
        """Samples this rank has been given in the current pass."""
        self.began: tuple[float, float] | None = None
        """When the current pass began: wall clock, and the seconds this thread had spent
        with other ranks (``StepStats.away_seconds``)."""

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self) -> Iterator[list[int]]:
        self.taken = 0
        self.began = (time.perf_counter(), self.binding.job.stats.away_seconds())
        speeds = getattr(self.sampler, SPEEDS, None)
        if speeds is None or len(speeds) != self.sampler.num_replicas:
            # The equal split (no pass measured, or measured in a world of another size);
            # ``scale`` is the training pass's, left alone.
            for batch in self.batch_sampler:
                self.taken += len(batch)
                yield batch
            return
        size = self.batch_sampler.batch_size
        mine, scale = shares.my_batches(self.sampler, speeds, len(self.batch_sampler), size)
        self.binding.job.stats.scale = scale
        for batch in mine:
            self.taken += len(batch)
            yield batch

    def measured(self) -> tuple[float, float]:
        """This pass's samples and busy seconds: its wall time less the time this thread
        (the one that iterates the loader) spent with other ranks, in Prague's steps and the
        script's collectives (a fast rank waits there for slow ones, so that time says
        nothing of its own speed)."""
        assert self.began is not None, "a pass ended that never began"
        wall = time.perf_counter() - self.began[0]
        away = max(0.0, self.binding.job.stats.away_seconds() - self.began[1])
        return float(self.taken), max(wall - away, 1e-6)


def pass_ended(batches: OwnPaceBatches, measured: tuple[float, float], allreduce: Any) -> None:
    """At the end of a training pass on every rank: sum each rank's samples and busy seconds
    (``measured``, taken when its pass ended, in its own row) with ``allreduce`` (a global
    collective), and keep the speeds for the next pass.

    A rank that left the pass early for Horovod's ``join`` takes part with zeros (Horovod's
    allgather refuses a joined rank; its allreduce does not), and a row of zeros keeps the
    speeds as they were, on every rank alike, the joined one included."""
    rank, size = batches.sampler.rank, batches.sampler.num_replicas
    rows = torch.zeros(size, 2, dtype=torch.float64)
    rows[rank] = torch.tensor(measured, dtype=torch.float64)
    rows = allreduce(rows, op=Sum, name="prague.own_pace")
    if bool((rows[:, 0] > 0).all()):
        setattr(batches.sampler, SPEEDS, shares.speeds(rows.tolist()))
    batches.binding.job.stats.scale = 1.0


def pace_loaders(binding: Binding) -> None:
    """Under ``own_pace=on``, give a DataLoader over a ``DistributedSampler`` of every rank,
    batched by PyTorch's own ``BatchSampler``, its batches from ``OwnPaceBatches`` (torch's
    ``DataLoader._index_sampler`` is patched once per process)."""
    original = DataLoader._index_sampler
    if getattr(original.fget, "_prague", False):
        return

    @functools.wraps(original.fget)
    def _index_sampler(loader: DataLoader) -> Any:
        index_sampler = original.fget(loader)
        if not _paced(loader, index_sampler, binding):
            return index_sampler
        own = loader.__dict__.get("_prague_own_pace")
        if own is None or own.batch_sampler is not index_sampler:
            own = OwnPaceBatches(index_sampler, binding)
            loader.__dict__["_prague_own_pace"] = own
        return own

    _index_sampler._prague = True  # type: ignore[attr-defined]
    DataLoader._index_sampler = property(_index_sampler)  # type: ignore[assignment]


def _paced(loader: DataLoader, index_sampler: Any, binding: Binding) -> bool:
    rt = binding.job.runtime
    if rt is None or rt.finished or rt.config.own_pace != "on":
        return False
    if not loader._auto_collation or type(index_sampler) is not BatchSampler:
        return False
    return spans_every_rank(index_sampler, binding.hvd.size(), DistributedSampler) is not None


def spans_every_rank(
    index_sampler: Any, size: int, kinds: type | tuple[type, ...]
) -> Sampler | None:
    """The sampler of a loader's pass, where it is one of ``kinds`` split over all ``size``
    ranks and batched by PyTorch's own ``BatchSampler`` (or own pace's, which keeps its batch
    count), or not batched at all (``batch_size=None``): then every rank's pass has as many
    batches. A custom batch sampler may give ranks different numbers of batches: None."""
    sampler = index_sampler
    if type(index_sampler) is BatchSampler or isinstance(index_sampler, OwnPaceBatches):
        sampler = index_sampler.sampler
    if isinstance(sampler, kinds) and sampler.num_replicas == size:
        return sampler
    return None
