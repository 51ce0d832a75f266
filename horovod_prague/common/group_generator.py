"""The Group Generator: per-rank group buffers in front of a strategy.

Every group a generation produces is appended to the buffers of all its members under one
lock, so all buffers list groups in one global order: any two ranks meet their shared groups
in the same order, and no cycle of waits can form. A global average (a *sync*) is the world
group placed in that same order, so it cannot deadlock against a pending partial group either.

    >>> from horovod_prague.common.strategies import StaticStrategy
    >>> from horovod_prague.common.topology import Topology
    >>> gg = GroupGenerator(StaticStrategy(Topology(4, 2), 2, 2, seed=0))
    >>> gg.next_group(0), gg.next_group(3), gg.next_group(0)
    ((0, 1), (2, 3), (0, 2))
"""

from __future__ import annotations

import collections
import threading

from .strategies import Group, GroupStrategy


class GroupGenerator:
    """Hands each rank its next group; thread-safe."""

    def __init__(self, strategy: GroupStrategy) -> None:
        self.strategy = strategy
        size = strategy.topology.size
        self.size = size
        self.counts = [0] * size
        self.world: Group = tuple(range(size))
        # Entries are (group, sync id); the sync id is 0 for groups a generation made.
        self.buffers: list[collections.deque[tuple[Group, int]]] = [
            collections.deque() for _ in range(size)
        ]
        self.active: set[int] = set(range(size))
        self.syncs: dict[int, bool] = {}
        self.generations = 0
        self._lock = threading.Lock()

    def next_group(self, rank: int) -> Group:
        """The next group ``rank`` must average with; ``(rank,)`` means alone."""
        with self._lock:
            self._check(rank)
            if rank not in self.active:
                raise ValueError(f"rank {rank} asked for a group after it finished")
            self.counts[rank] += 1
            if not self.buffers[rank]:
                self._generate(rank)
            if not self.buffers[rank]:
                return (rank,)
            return self.buffers[rank].popleft()[0]

    def sync(self, rank: int, sync_id: int) -> list[Group] | None:
        """Groups ``rank`` must run to reach global sync ``sync_id``, the world group last.

        The first rank to ask for a sync id places the world group at the end of every buffer.
        Returns [] if ``rank`` already ran that world group from its buffer, and None if the
        sync cannot happen because some rank has finished (then it never happens for anyone).
        """
        with self._lock:
            self._check(rank)
            if rank not in self.active:
                raise ValueError(f"rank {rank} asked for sync {sync_id} after it finished")
            if sync_id not in self.syncs:
                self.syncs[sync_id] = len(self.active) == self.size
                if self.syncs[sync_id]:
                    for buffer in self.buffers:
                        buffer.append((self.world, sync_id))
            if not self.syncs[sync_id]:
                return None
            buffer = self.buffers[rank]
            if not any(sid == sync_id for _, sid in buffer):
                return []
            run: list[Group] = []
            while True:
                group, sid = buffer.popleft()
                run.append(group)
                if sid == sync_id:
                    return run

    def finish(self, rank: int) -> list[Group]:
        """Mark ``rank`` finished and return the groups already decided for it.

        The rank must still run those groups: their other members will. No group made after
        this call contains ``rank``.
        """
        with self._lock:
            self._check(rank)
            self.active.discard(rank)
            left = [group for group, _ in self.buffers[rank]]
            self.buffers[rank].clear()
            return left

    def _generate(self, requester: int) -> None:
        active = frozenset(self.active)
        backlog = [len(b) for b in self.buffers]
        groups = self.strategy.generate(requester, tuple(self.counts), active, backlog)
        seen: set[int] = set()
        for group in groups:
            if seen.intersection(group) or not active.issuperset(group):
                raise RuntimeError(
                    f"strategy {self.strategy.name!r} produced an invalid generation {groups}: "
                    "groups must be disjoint and hold only active ranks"
                )
            seen.update(group)
        if requester not in seen:
            raise RuntimeError(
                f"strategy {self.strategy.name!r} gave requester {requester} no group: {groups}"
            )
        self.generations += 1
        for group in groups:
            if len(group) > 1:
                for member in group:
                    self.buffers[member].append((group, 0))

    def _check(self, rank: int) -> None:
        if not (isinstance(rank, int) and 0 <= rank < self.size):
            raise ValueError(f"rank {rank!r} is not in 0..{self.size - 1}")
