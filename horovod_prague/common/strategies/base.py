"""The interface every group-generation strategy implements."""

from __future__ import annotations

import abc
from collections.abc import Sequence

from ..config import LARGE_JOB
from ..topology import Topology
from .divisions import Group


class GroupStrategy(abc.ABC):
    """Decides groups for the Group Generator.

    A strategy knows up front every group it may ever emit (``groups()``): those are registered
    as Horovod process sets at init, so their number per rank is what a strategy must keep small.

    ``generate`` is called when a rank asks for a group and has none buffered. It gets every
    rank's request count and ``backlog`` (groups buffered and not yet run) and returns disjoint
    groups, all made of ``active`` ranks, one of which contains the requester; that one may be
    the requester alone, which means "no averaging this step".
    """

    name: str = ""

    def __init__(
        self, topology: Topology, group_size: int, pool_size: int, seed: int, threshold: int = 0
    ) -> None:
        if group_size > topology.size:
            raise ValueError(
                f"group_size: {group_size} is larger than the world size {topology.size}"
            )
        self.topology = topology
        self.group_size = group_size
        self.pool_size = pool_size
        self.seed = seed
        self.threshold = threshold

    @classmethod
    def auto_group_size(cls, size: int) -> int:
        """The group size a job of ``size`` ranks runs with when ``group_size`` is 0 (auto).

        >>> GroupStrategy.auto_group_size(8), GroupStrategy.auto_group_size(16)
        (2, 4)
        """
        return 2 if size < LARGE_JOB else 4

    @abc.abstractmethod
    def groups(self) -> tuple[Group, ...]:
        """Every group of two or more ranks this strategy can return, in a fixed order."""

    @abc.abstractmethod
    def generate(
        self,
        requester: int,
        counts: Sequence[int],
        active: frozenset[int],
        backlog: Sequence[int] | None = None,
    ) -> list[Group]:
        """Groups for one generation; see the class docstring."""

    def sets_per_rank(self) -> int:
        """The largest number of this strategy's groups any one rank belongs to."""
        per_rank = [0] * self.topology.size
        for group in self.groups():
            for rank in group:
                per_rank[rank] += 1
        return max(per_rank)
