"""An epoch's samples dealt out by speed: each rank a share, in the same number of batches.

Framework-neutral and Horovod-free: ``horovod_prague.torch.pace`` (own pace under Prague) and
``prague-bench``'s balanced All-Reduce baseline use it::

    counts = shares([4.0, 4.0, 1.0, 1.0], total=1000, batches=10)   # [400, 400, 100, 100]
    mine = dealt_order(sampler)[sum(counts[:rank]) : sum(counts[: rank + 1])]
    sizes = batch_sizes(len(mine), batches)                         # 10 batches of mine
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


def shares(speeds: Sequence[float], total: int, batches: int) -> list[int]:
    """``total`` samples split over the ranks in proportion to ``speeds``, each at least
    ``MIN_SHARE`` of the equal share and two samples per batch, summing to ``total``.

    >>> shares([1.0, 1.0, 0.25, 0.25], total=1000, batches=10)
    [400, 400, 100, 100]
    >>> shares([1.0, 0.01], total=100, batches=5)
    [87, 13]
    """
    n = len(speeds)
    if not all(v > 0 and math.isfinite(v) for v in speeds):
        raise ValueError(f"own pace: speeds must be positive and finite, got {list(speeds)}")
    floor = min(total // n, max(math.ceil(MIN_SHARE * total / n), 2 * batches))
    # Raise the slowest to the floor, then share the rest in proportion among the others.
    fixed = [False] * n
    while True:
        free = total - floor * sum(fixed)
        free_speed = sum(v for v, f in zip(speeds, fixed, strict=True) if not f)
        if free_speed == 0:  # every rank at the floor: the floor is the equal share
            ideal = [total / n] * n
            break
        rate = free / free_speed
        ideal = [floor if f else v * rate for v, f in zip(speeds, fixed, strict=True)]
        low = [i for i in range(n) if not fixed[i] and ideal[i] < floor - 1e-9]
        if not low:
            break
        for i in low:
            fixed[i] = True
    counts = [math.floor(x) for x in ideal]
    by_remainder = sorted(range(n), key=lambda i: (counts[i] - ideal[i], i))
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    return counts


def batch_sizes(samples: int, batches: int) -> list[int]:
    """``samples`` in ``batches`` batches as even as can be, the larger first.

    >>> batch_sizes(10, 4)
    [3, 3, 2, 2]
    """
    size, extra = divmod(samples, batches)
    return [size + 1] * extra + [size] * (batches - extra)


def dealt_order(sampler: Any) -> list[int]:
    """Every rank's indices of a ``DistributedSampler``'s current epoch, by the sampler's own
    ``__iter__`` run for each rank (a subclass's order is kept), interleaved as it deals them
    out: one pass over the sampler per rank."""
    parts = []
    for rank in range(sampler.num_replicas):
        view = copy.copy(sampler)
        view.rank = rank
        parts.append(list(iter(view)))
    return [i for group in zip(*parts, strict=True) for i in group]


def my_batches(
    sampler: Any, speeds: Sequence[float], batches: int, per_rank: int
) -> tuple[list[list[int]], list[int]]:
    """This rank's (``sampler.rank``) batches of the sampler's current epoch, its share by
    ``speeds`` of the ``per_rank`` samples each rank takes in the equal split, cut into
    ``batches`` batches; and every rank's share."""
    counts = shares(speeds, per_rank * sampler.num_replicas, batches)
    start = sum(counts[: sampler.rank])
    mine = dealt_order(sampler)[start : start + counts[sampler.rank]]
    out = []
    for size in batch_sizes(len(mine), batches):
        out.append(mine[:size])
        mine = mine[size:]
    return out, counts
