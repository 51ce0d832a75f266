"""Pair divisions shared by the process-set benchmark workers."""

from __future__ import annotations

import random


def pair_divisions(size: int, count: int, seed: int = 0) -> list[tuple[int, ...]]:
    """The pairs of ``count`` divisions of ``size`` ranks into pairs, no pair in two of them:
    each rank is in ``count`` pairs."""
    rng = random.Random(seed)
    divisions: list[list[tuple[int, ...]]] = []
    while len(divisions) < count:
        order = list(range(size))
        rng.shuffle(order)
        pairs = [tuple(sorted(order[i : i + 2])) for i in range(0, size, 2)]
        if all(set(pairs).isdisjoint(d) for d in divisions):
            divisions.append(pairs)
    return [p for d in divisions for p in d]
