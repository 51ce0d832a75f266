"""``allreduce``: the whole world every step, the baseline that waits for the slowest rank.

Once any rank has finished, the world group can no longer form and every rank averages with
nobody until it finishes too.

    >>> from horovod_prague.common.topology import Topology
    >>> AllreduceStrategy(Topology(3, 3), 2, 1, 0).generate(1, [1, 1, 1], frozenset({0, 1, 2}))
    [(0, 1, 2)]
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import GroupStrategy
from .divisions import Group


class AllreduceStrategy(GroupStrategy):
    name = "allreduce"

    @classmethod
    def auto_group_size(cls, size: int) -> int:
        """The world: its one group, a lone rank in a world of 1.

        >>> AllreduceStrategy.auto_group_size(1), AllreduceStrategy.auto_group_size(16)
        (1, 16)
        """
        return size

    def groups(self) -> tuple[Group, ...]:
        return ()

    def generate(
        self,
        requester: int,
        counts: Sequence[int],
        active: frozenset[int],
        backlog: Sequence[int] | None = None,
    ) -> list[Group]:
        world = tuple(range(self.topology.size))
        return [world] if active.issuperset(world) else [(requester,)]
