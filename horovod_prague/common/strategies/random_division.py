"""``random``: Group Division alone, drawn from a fixed pool of random divisions.

Each generation picks one division of the pool at random and hands out all of its groups
whose members are still training. Like Divide-and-Shuffle, but the shuffles are drawn from a
pool registered once, so every rank belongs to only ``pool_size`` Horovod process sets.

    >>> from horovod_prague.common.topology import Topology
    >>> s = RandomStrategy(Topology(4, 4), group_size=2, pool_size=3, seed=0)
    >>> s.sets_per_rank()
    3
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from ..topology import Topology
from .base import GroupStrategy
from .divisions import (
    Division,
    Group,
    distinct_groups,
    is_connected,
    random_division,
    restrict,
)

_POOL_ATTEMPTS = 100
_DISTINCT_ATTEMPTS = 50


class RandomStrategy(GroupStrategy):
    name = "random"

    def __init__(
        self, topology: Topology, group_size: int, pool_size: int, seed: int, threshold: int = 0
    ) -> None:
        super().__init__(topology, group_size, pool_size, seed, threshold)
        made = self._build_pool(random.Random(f"{seed}:pool"))
        self.pool: tuple[Division, ...] = tuple(d for _, d in made)
        self.pool_origin: tuple[int, ...] = tuple(i for i, _ in made)
        # Per division of the pool, each rank's group in it.
        self._group_of: tuple[dict[int, Group], ...] = tuple(
            {rank: group for group in division for rank in group} for division in self.pool
        )
        self.rng = random.Random(f"{seed}:generate")
        self.generation = 0

    def make_division(self, index: int, rng: random.Random) -> Division:
        """The ``index``-th division of the pool; subclasses shape it."""
        return random_division(range(self.topology.size), self.group_size, rng)

    def _build_pool(self, rng: random.Random) -> list[tuple[int, Division]]:
        """Pairs (index given to ``make_division``, division), connected as a whole."""
        size = self.topology.size
        if self.group_size >= size:
            return [(0, (tuple(range(size)),))]
        if self.pool_size < 2:
            raise ValueError(
                f"pool_size: one division of {size} ranks into groups of {self.group_size} "
                "never mixes its groups; use pool_size >= 2"
            )
        for _ in range(_POOL_ATTEMPTS):
            pool: list[tuple[int, Division]] = []
            for index in range(self.pool_size):
                for _ in range(_DISTINCT_ATTEMPTS):
                    division = self.make_division(index, rng)
                    if all(division != d for _, d in pool):
                        pool.append((index, division))
                        break
            if is_connected(size, (g for _, d in pool for g in d)):
                return pool
        raise ValueError(
            f"pool_size: {self.pool_size} divisions of {size} ranks into groups of "
            f"{self.group_size} did not connect all ranks in {_POOL_ATTEMPTS} tries; "
            "raise pool_size"
        )

    def groups(self) -> tuple[Group, ...]:
        return distinct_groups(self.pool, self.topology.size)

    def eligible(
        self,
        requester: int,
        counts: Sequence[int],
        active: frozenset[int],
        backlog: Sequence[int] | None = None,
    ) -> frozenset[int]:
        """Ranks that may share a group with ``requester`` in this generation."""
        return active | {requester}

    def candidates(self, requester: int, allowed: frozenset[int]) -> list[int]:
        """The indices in ``pool`` of the divisions whose group of ``requester`` is allowed."""
        return [
            i for i, groups in enumerate(self._group_of) if allowed.issuperset(groups[requester])
        ]

    def generate(
        self,
        requester: int,
        counts: Sequence[int],
        active: frozenset[int],
        backlog: Sequence[int] | None = None,
    ) -> list[Group]:
        allowed = self.eligible(requester, counts, active, backlog)
        choices = self.candidates(requester, allowed)
        self.generation += 1
        if not choices:
            return [(requester,)]
        return restrict(self.pool[self.rng.choice(choices)], allowed)
