"""An epoch's samples dealt out by speed: each rank a share, in the same number of batches.

Framework-neutral and Horovod-free: ``horovod_prague.torch.pace`` (own pace under Prague) and
``prague-bench``'s balanced All-Reduce baseline use it::

    counts = shares([4.0, 4.0, 1.0, 1.0], total=1000, batches=10)   # [400, 400, 100, 100]
    mine = dealt_order(sampler)[sum(counts[:rank]) : sum(counts[: rank + 1])]
    sizes = batch_sizes(len(mine), batches)                         # 10 batches of mine

``my_batches`` does all three for a sampler; ``speeds`` turns the ranks' gathered
(samples, busy seconds) into what ``shares`` takes.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

MIN_SHARE = 0.25
"""The least share of the epoch a rank takes, as a part of its equal share, however slow it
was measured: a model that sees too few samples drifts from the others (and BatchNorm needs
more than one sample per batch)."""

MAX_SHARE = 2.0
"""The most a rank takes, as a part of its equal share, however fast it was measured: its
batches grow with its share, and a script sized its memory (a GPU's) for the batch it
asked for."""


def shares(speeds: Sequence[float], total: int, batches: int) -> list[int]:
    """``total`` samples split over the ranks in proportion to ``speeds``, each between
    ``MIN_SHARE`` (and two samples per batch) and ``MAX_SHARE`` of the equal share, summing
    to ``total``; every rank computes the same from the same speeds.

    >>> shares([1.0, 1.0, 0.25, 0.25], total=1000, batches=10)
    [400, 400, 100, 100]
    >>> shares([1.0, 0.01], total=100, batches=5)
    [87, 13]
    >>> shares([10.0, 1.0, 1.0, 1.0], total=400, batches=4)
    [200, 67, 67, 66]
    """
    n = len(speeds)
    if not all(v > 0 and math.isfinite(v) for v in speeds):
        raise ValueError(f"own pace: speeds must be positive and finite, got {list(speeds)}")
    low = min(total // n, max(math.ceil(MIN_SHARE * total / n), 2 * batches))
    high = max(-(-total // n), math.floor(MAX_SHARE * total / n))
    # Relative speeds, none below 1e-9 of the fastest (such a rank sits at ``low`` anyway), so
    # that the rates below stay finite.
    top = max(speeds)
    relative = [max(v / top, 1e-9) for v in speeds]

    def placed(rate: float) -> list[float]:
        return [min(max(v * rate, low), high) for v in relative]

    # The rate at which the clamped shares sum to the total: their sum grows with the rate,
    # from n * low (at 0) to n * high (at the first ``fast``), and low <= total / n <= high.
    # Halve until the two ends are neighbouring floats.
    slow, fast = 0.0, high / min(relative)
    while slow < (mid := (slow + fast) / 2) < fast:
        if math.fsum(placed(mid)) < total:
            slow = mid
        else:
            fast = mid
    ideal = placed(fast)
    counts = [math.floor(x) for x in ideal]
    # Round to the total: one more for the largest remainders (or one less for the smallest).
    by_remainder = sorted(range(n), key=lambda i: (counts[i] - ideal[i], i))
    missing = total - sum(counts)
    while missing > 0:
        for i in by_remainder:
            if missing > 0 and counts[i] < high:
                counts[i] += 1
                missing -= 1
    while missing < 0:
        for i in reversed(by_remainder):
            if missing < 0 and counts[i] > low:
                counts[i] -= 1
                missing += 1
    return counts


def batch_sizes(samples: int, batches: int) -> list[int]:
    """``samples`` in ``batches`` batches as even as can be, the larger first.

    >>> batch_sizes(10, 4)
    [3, 3, 2, 2]
    """
    size, extra = divmod(samples, batches)
    return [size + 1] * extra + [size] * (batches - extra)


def speeds(rows: Sequence[Sequence[float]]) -> list[float]:
    """Each rank's samples per busy second, from its ``(samples, busy seconds)`` of a pass.

    >>> speeds([(64.0, 2.0), (64.0, 0.0)])
    [32.0, 64000000.0]
    """
    return [float(taken) / max(float(busy), 1e-6) for taken, busy in rows]


def equal_share(sampler: Any, batches: int, batch_size: int) -> int:
    """The samples each rank takes in a pass of the sampler's equal split: its part, less what
    a loader that drops the last partial batch leaves out."""
    return min(sampler.num_samples, batches * batch_size)


def dealt_order(sampler: Any) -> list[int]:
    """Every rank's indices of a ``DistributedSampler``'s current epoch, interleaved as the
    sampler deals them out (rank 0's first, rank 1's first, ...).

    A sampler whose ``__iter__`` is torch's own deals one padded permutation in turn, so one
    view of it as a single rank gives them all; a subclass with an ``__iter__`` of its own
    is run once per rank, so that its order is kept.
    """
    if _deals_one_permutation(sampler):
        view = copy.copy(sampler)
        view.rank, view.num_replicas, view.num_samples = 0, 1, sampler.total_size
        return list(iter(view))
    parts = []
    for rank in range(sampler.num_replicas):
        view = copy.copy(sampler)
        view.rank = rank
        parts.append(list(iter(view)))
    return [i for group in zip(*parts, strict=True) for i in group]


def _deals_one_permutation(sampler: Any) -> bool:
    method = getattr(type(sampler), "__iter__", None)
    return (
        getattr(method, "__module__", None) == "torch.utils.data.distributed"
        and getattr(method, "__qualname__", None) == "DistributedSampler.__iter__"
        and hasattr(sampler, "total_size")
    )


def my_batches(
    sampler: Any, speeds: Sequence[float], batches: int, batch_size: int
) -> tuple[list[list[int]], float]:
    """This rank's (``sampler.rank``) batches of the sampler's current epoch: its share by
    ``speeds`` of the samples the equal split gives (``equal_share``), cut into ``batches``
    batches; and that share as a part of its equal share (above 1 on a fast rank)."""
    per_rank = equal_share(sampler, batches, batch_size)
    counts = shares(speeds, per_rank * sampler.num_replicas, batches)
    start = sum(counts[: sampler.rank])
    mine = dealt_order(sampler)[start : start + counts[sampler.rank]]
    out = []
    for size in batch_sizes(len(mine), batches):
        out.append(mine[:size])
        mine = mine[size:]
    return out, counts[sampler.rank] / per_rank
