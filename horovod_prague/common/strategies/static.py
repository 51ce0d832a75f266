"""``static``: a fixed, conflict-free schedule that alternates intra-node and inter-node groups.

The schedule is a cycle of divisions: intra, inter, intra', inter', ... Intra step ``s`` cuts
each node's ranks into consecutive groups after shifting them by ``s`` half-groups; inter step
``s`` walks the ranks column by column (local rank 0 of every node, then local rank 1, ...),
rotating the node order for local rank ``j`` by ``j + s``, so groups cross nodes. Steps are
added until the groups connect every rank (2 to 4 distinct divisions for every shape up to
8 nodes x 8 ranks; each is one process set per rank). On one node, or with one rank per
node, the distinct divisions alone form the cycle. ``pool_size`` does not apply.

    >>> from horovod_prague.common.topology import Topology
    >>> StaticStrategy(Topology(4, 2), group_size=2, pool_size=2, seed=0).schedule
    (((0, 1), (2, 3)), ((0, 2), (1, 3)))
"""

from __future__ import annotations

from collections.abc import Sequence

from ..topology import Topology
from .base import GroupStrategy
from .divisions import (
    Division,
    Group,
    chunk,
    distinct_groups,
    group_of,
    is_connected,
    restrict,
    whole_groups_first,
)


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

    @classmethod
    def auto_group_size(cls, size: int) -> int:
        """As any strategy's, but pairs where the larger groups cannot tile the job.

        >>> StaticStrategy.auto_group_size(16), StaticStrategy.auto_group_size(18)
        (4, 2)
        """
        group_size = super().auto_group_size(size)
        return group_size if size % group_size == 0 else 2

    def _build_schedule(self) -> tuple[Division, ...]:
        t, k = self.topology, self.group_size
        schedule: list[Division] = []
        nodes = [t.ranks_on(node) for node in range(t.cross_size)]
        for step in range(2 * t.size):
            shift = step * max(1, k // 2)
            intra = whole_groups_first(
                [[ranks[(i + shift) % len(ranks)] for i in range(len(ranks))] for ranks in nodes], k
            )
            inter = [
                nodes[node][local]
                for local in range(t.local_size)
                for node in ((n + local + step) % t.cross_size for n in range(t.cross_size))
                if local < len(nodes[node])
            ]
            schedule += [chunk(intra, k), chunk(inter, k)]
            if is_connected(t.size, (g for d in schedule for g in d)):
                break
        if t.cross_size == 1 or t.local_size == 1:
            # Intra and inter coincide on one node or one rank per node: keep each once.
            schedule = list(dict.fromkeys(schedule))
        return tuple(schedule)

    def groups(self) -> tuple[Group, ...]:
        return distinct_groups(self.schedule, self.topology.size)

    def generate(
        self,
        requester: int,
        counts: Sequence[int],
        active: frozenset[int],
        backlog: Sequence[int] | None = None,
    ) -> list[Group]:
        division = self.schedule[self.generation % len(self.schedule)]
        self.generation += 1
        groups = restrict(division, active)
        if not active.issuperset(group_of(division, requester)):
            groups.append((requester,))
        return groups
