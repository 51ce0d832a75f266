"""``static``: a fixed, conflict-free schedule that alternates intra-node and inter-node groups.

The schedule is a cycle of divisions. Intra divisions cut each node's ranks into consecutive
groups; inter divisions walk the ranks column by column (local rank 0 of every node, then local
rank 1, ...) with the node order rotated by one more step each time, so consecutive ranks sit on
different nodes. On one node the inter step is the intra step rotated by half a group.

    >>> from horovod_prague.common.topology import Topology
    >>> StaticStrategy(Topology(4, 2), group_size=2, pool_size=2, seed=0).schedule
    (((0, 1), (2, 3)), ((0, 2), (1, 3)))
"""

from __future__ import annotations

from collections.abc import Sequence

from ..topology import Topology
from .base import GroupStrategy
from .divisions import Division, Group, chunk, group_of, restrict


class StaticStrategy(GroupStrategy):
    name = "static"

    def __init__(
        self, topology: Topology, group_size: int, pool_size: int, seed: int, threshold: int = 0
    ) -> None:
        super().__init__(topology, group_size, pool_size, seed, threshold)
        if topology.size % group_size:
            raise ValueError(
                f"group_size: the static schedule needs the world size ({topology.size}) to be "
                f"a multiple of group_size ({group_size})"
            )
        self.schedule: tuple[Division, ...] = self._build_schedule()
        self.generation = 0

    def _build_schedule(self) -> tuple[Division, ...]:
        t, k = self.topology, self.group_size
        intra = chunk(range(t.size), k)
        if k == t.size:
            return (intra,)
        if t.cross_size == 1 or t.local_size == 1:
            shift = max(1, k // 2)
            rotated = [(r + shift) % t.size for r in range(t.size)]
            return (intra, chunk(rotated, k))
        schedule: list[Division] = []
        for step in range(max(1, self.pool_size // 2)):
            order = [
                ((node + step * local) % t.cross_size) * t.local_size + local
                for local in range(t.local_size)
                for node in range(t.cross_size)
            ]
            inter = chunk(order, k)
            if inter in schedule:
                break
            schedule += [intra, inter]
        return tuple(schedule)

    def groups(self) -> tuple[Group, ...]:
        seen: dict[Group, None] = {}
        for division in self.schedule:
            for group in division:
                if len(group) < self.topology.size:
                    seen.setdefault(group)
        return tuple(seen)

    def generate(
        self, requester: int, counts: Sequence[int], active: frozenset[int]
    ) -> list[Group]:
        division = self.schedule[self.generation % len(self.schedule)]
        self.generation += 1
        groups = restrict(division, active)
        if not active.issuperset(group_of(division, requester)):
            groups.append((requester,))
        return groups
