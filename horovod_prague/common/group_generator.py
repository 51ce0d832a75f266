"""The Group Generator: per-rank group buffers in front of a strategy.

Every group a generation produces is appended to the buffers of all its members under one
lock, so all buffers list groups in one global order: any two ranks meet their shared groups
in the same order, and no cycle of waits can form.

A global average (a *sync*) is a barrier at the same point of every rank's program. A rank
that reaches it takes its whole buffer, to run before the world group, and is *paused*: no
group formed while it is paused contains it, so no rank waits in a group for a rank waiting
in the world group (or in the script's own global collective after it). Once every rank has
reached the sync (or finished), all are active again: a rank that asks for a group then has
passed the world group, and every global collective the others may still be in.

A script's collective on a process set of some ranks (a *settle*) is the same barrier for the
set's members alone: a member that reaches it takes its buffer, to run before the collective,
and is *held* (no group formed contains it; its steps until then take no group) until every
member has reached it (or finished). The collective then sits in the one global order like a
group made at that moment, so no cycle of waits can form through it either.

The periodic global average (``sync_every``) is no sync: it is the world group, which the
generator appends to every buffer as an ordinary group (``WorldGroup``) when some rank's
request count first reaches a new multiple of ``sync_every``. It then sits in one global
order with every other group, so each rank meets it as a step (``next_group``) or as an owed
group (``sync``, ``finish``) at the same place relative to its other groups, whatever the
ranks' step counts. It is postponed while a rank is paused at a sync (that rank has taken its
buffer and waits in the sync's world average) or held at a settle, to the next request after
that, and
skipped once a rank has finished (the final average of ``finish`` takes its place).

    >>> from horovod_prague.common.strategies import StaticStrategy
    >>> from horovod_prague.common.topology import Topology
    >>> gg = GroupGenerator(StaticStrategy(Topology(4, 2), 2, 2, seed=0))
    >>> gg.next_group(0), gg.next_group(3), gg.next_group(0)
    ((0, 1), (2, 3), (0, 2))
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Sequence
from typing import NamedTuple

from .strategies import Group, GroupStrategy


class WorldGroup(tuple[int, ...]):
    """The world group as a periodic global average (``sync_every``), which its members run
    blocking, after draining their averages in flight. Equal to the plain tuple of all ranks:
    the same process set and collective names, so a member running it as an owed group meets
    one running it as a step."""

    __slots__ = ()


class Owed(NamedTuple):
    """What a rank must run before it goes on: ``groups``, those already decided for its
    steps, in order, then ``world_averages`` averages over all ranks (one per sync).

    Kept apart because their other members run them differently: a group as a step
    (averaging what a step averages), a world average as a sync.
    """

    groups: list[Group]
    world_averages: int


class GroupGenerator:
    """Hands each rank its next group; thread-safe."""

    def __init__(self, strategy: GroupStrategy, sync_every: int = 0) -> None:
        if sync_every < 0:
            raise ValueError(f"sync_every: must be >= 0 (0 = never), got {sync_every}")
        self.strategy = strategy
        self.sync_every = sync_every
        # How many multiples of sync_every some rank's count has reached (made or skipped).
        self.world_rounds = 0
        size = strategy.topology.size
        self.size = size
        self.counts = [0] * size
        # Each rank's count when all ranks last held one model (a sync's world average, the
        # periodic world group, or Horovod's join): the strategy compares steps taken since
        # then, not since the start.
        self.counts_at_consensus = [0] * size
        self.world: Group = tuple(range(size))
        self.buffers: list[collections.deque[Group]] = [collections.deque() for _ in range(size)]
        self.active: set[int] = set(range(size))
        self.paused: set[int] = set()
        # sync id -> whether it happens (decided when the first rank reaches it).
        self.syncs: dict[int, bool] = {}
        self.arrived: dict[int, set[int]] = collections.defaultdict(set)
        self.generations = 0
        self.last_asked = [time.monotonic()] * size
        # The group each rank said it has waited on for long (``note_waiting``), until it asks
        # for anything else.
        self.waiting: list[Group | None] = [None] * size
        # The script's collective each rank said it has waited in for long, by name, if any.
        self.collectives: list[str | None] = [None] * size
        # Settles: each rank's count per set of members, the members that reached each
        # settle not yet complete, keyed (members, count), and the ranks held there.
        self.settles: list[collections.Counter[Group]] = [
            collections.Counter() for _ in range(size)
        ]
        self.gathering: dict[tuple[Group, int], set[int]] = {}
        self.held: dict[int, set[tuple[Group, int]]] = {}
        self._lock = threading.Lock()

    def next_group(self, rank: int) -> Group:
        """The next group ``rank`` must average with; ``(rank,)`` means alone."""
        with self._lock:
            self._check(rank)
            if rank not in self.active:
                raise ValueError(f"rank {rank} asked for a group after it finished")
            self.paused.discard(rank)
            self.counts[rank] += 1
            self._periodic_world_group(rank)
            if rank in self.held:  # no group may wait for a rank held at a settle
                return (rank,)
            if not self.buffers[rank]:
                self._generate(rank)
            if not self.buffers[rank]:
                return (rank,)
            group = self.buffers[rank].popleft()
            if isinstance(group, WorldGroup):  # with this step, every rank holds one model
                self.counts_at_consensus[rank] = self.counts[rank]
            return group

    def sync(self, rank: int, sync_id: int) -> Owed:
        """What ``rank`` must run to reach global sync ``sync_id``: the groups already decided
        for it, then one world average, or none if some rank had finished when the first rank
        reached the sync (a world average can no longer form; under Horovod's ``join`` the
        script's own collective still runs, with the joined ranks' zeros).

        Pauses ``rank`` until every rank has reached the sync or finished, so that no group
        formed meanwhile waits for a rank that is in the script's global collective.
        """
        with self._lock:
            self._check(rank)
            if rank not in self.active:
                raise ValueError(f"rank {rank} asked for sync {sync_id} after it finished")
            if sync_id not in self.syncs:
                self.syncs[sync_id] = len(self.active) == self.size
            if rank in self.arrived[sync_id]:
                raise ValueError(f"rank {rank} reached sync {sync_id} twice")
            self.paused.add(rank)
            groups = list(self.buffers[rank])
            self.buffers[rank].clear()
            self._arrive(sync_id, rank)
            return Owed(groups, 1 if self.syncs[sync_id] else 0)

    def settle(self, rank: int, members: Group) -> Owed:
        """What ``rank`` must run before the script's next collective over ``members``, a
        process set of some ranks with ``rank`` among them: the groups already decided for
        it (no world average: the members' models need not agree for the script's collective).

        Holds ``rank`` until every member has reached its settle of the same count over
        ``members`` (or finished): no group formed meanwhile contains it, so no rank waits in
        a group for a member waiting in the collective.
        """
        with self._lock:
            self._check(rank)
            members = self._group_of(rank, members, "process set")
            if rank not in self.active:
                raise ValueError(
                    f"rank {rank} reached a settle over {list(members)} after it finished"
                )
            self.settles[rank][members] += 1
            key = (members, self.settles[rank][members])
            self.gathering.setdefault(key, set()).add(rank)
            self.held.setdefault(rank, set()).add(key)
            groups = list(self.buffers[rank])
            self.buffers[rank].clear()
            if any(isinstance(g, WorldGroup) for g in groups):
                self.counts_at_consensus[rank] = self.counts[rank]
            self._gather(key)
            return Owed(groups, 0)

    def held_ranks(self) -> list[int]:
        """The ranks held at a settle now."""
        with self._lock:
            return sorted(self.held)

    def _group_of(self, rank: int, group: Group, what: str) -> Group:
        """``group`` sorted, checked to be ``what`` (a group, a process set) of ``rank``: two
        or more distinct ranks of the world, ``rank`` among them."""
        ranks = tuple(group)
        if (
            len(ranks) < 2
            or len(set(ranks)) != len(ranks)
            or rank not in ranks
            or not all(
                isinstance(r, int) and not isinstance(r, bool) and 0 <= r < self.size for r in ranks
            )
        ):
            raise ValueError(
                f"{list(ranks)!r} is not a {what} of rank {rank}: distinct ranks in "
                f"0..{self.size - 1}, at least two, {rank} among them"
            )
        return tuple(sorted(ranks))

    def _gather(self, key: tuple[Group, int]) -> None:
        """Release the members held at settle ``key`` once each has reached it or finished."""
        members, _ = key
        arrived = self.gathering[key]
        if all(m in arrived or m not in self.active for m in members):
            del self.gathering[key]
            for m in members:
                keys = self.held.get(m)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self.held[m]

    def finish(self, rank: int) -> Owed:
        """Mark ``rank`` finished and return what it must still run.

        The groups already decided for it, which their other members will run, then the world
        average of every sync other ranks have reached and it has not. No group made after
        this call contains ``rank``.
        """
        with self._lock:
            self._check(rank)
            self.active.discard(rank)
            self.paused.discard(rank)
            groups = list(self.buffers[rank])
            self.buffers[rank].clear()
            missed = [
                sync_id
                for sync_id, happens in sorted(self.syncs.items())
                if happens and rank not in self.arrived[sync_id]
            ]
            for sync_id in missed:
                self._arrive(sync_id, rank)
            self.held.pop(rank, None)
            for key in [k for k in self.gathering if rank in k[0]]:
                self._gather(key)
            if self.arrived:  # the ranks paused at the latest sync no longer wait for this one
                self._release(max(self.arrived))
            return Owed(groups, len(missed))

    def rejoin(self, rank: int) -> int:
        """Make ``rank``, which finished, active again (after Horovod's ``join``, which
        returns once every rank has finished); the id of the last sync any rank reached, from
        which its sync ids go on, as every rank's do after a rejoin."""
        with self._lock:
            self._check(rank)
            if rank in self.active:
                raise ValueError(f"rank {rank} asked to rejoin but it has not finished")
            self.active.add(rank)
            self.counts_at_consensus[rank] = self.counts[rank]
            # Every rank has finished (Horovod's join) and rejoins before its next settle:
            # all count settles afresh, alike.
            self.settles[rank].clear()
            return max(self.syncs, default=0)

    def _arrive(self, sync_id: int, rank: int) -> None:
        self.arrived[sync_id].add(rank)
        self._release(sync_id)

    def _release(self, sync_id: int) -> None:
        """Resume the paused ranks once every rank has reached ``sync_id``, the latest sync
        (only there can ranks be paused), or finished: no rank still waits on a pre-sync group
        or collective."""
        if (
            self.paused
            and sync_id == max(self.arrived)
            and all(r in self.arrived[sync_id] or r not in self.active for r in range(self.size))
        ):
            self.paused.clear()
            if self.syncs[sync_id]:
                self.counts_at_consensus = list(self.counts)

    def _periodic_world_group(self, rank: int) -> None:
        """Append the world group to every buffer if ``rank``'s count reached a new multiple
        of ``sync_every``: skipped once a rank has finished, postponed while one is paused."""
        if not self.sync_every:
            return
        rounds = self.counts[rank] // self.sync_every
        if rounds <= self.world_rounds:
            return
        if len(self.active) < self.size:
            self.world_rounds = rounds
            return
        if self.paused or self.held:
            return
        self.world_rounds = rounds
        world = WorldGroup(self.world)
        for buffer in self.buffers:
            buffer.append(world)

    def _generate(self, requester: int) -> None:
        active = frozenset(self.active - self.paused - self.held.keys())
        backlog = [len(b) for b in self.buffers]
        groups = self.strategy.generate(requester, self.steps_since_consensus(), active, backlog)
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
                    self.buffers[member].append(group)

    def steps_since_consensus(self) -> tuple[int, ...]:
        """Each rank's requests since all ranks last held one model: how far one lags
        another now. Counted from the start, ranks with uneven data (a ``join`` per epoch)
        would drift apart for good, and the threshold rule would leave the one that took
        the most steps alone."""
        return tuple(c - at for c, at in zip(self.counts, self.counts_at_consensus, strict=True))

    def silence(self) -> list[float | None]:
        """Seconds since each rank last asked for anything (since start, if never); None for
        ranks that finished or wait at a sync, which are silent by design.

        A rank that stopped stepping stops asking; so do the ranks waiting in its groups, but
        later: the longest silence points at the rank that holds the others up.
        """
        with self._lock:
            now = time.monotonic()
            return [
                round(now - t, 3) if r in self.active and r not in self.paused else None
                for r, t in enumerate(self.last_asked)
            ]

    def note_waiting(self, rank: int, group: Group, collective: str | None = None) -> None:
        """``rank`` has waited long for the average of ``group``, one of its groups, or, with
        ``collective``, in the script's collective of that name over the ranks ``group``; it
        stays waiting until it next asks for anything."""
        self._check_rank(rank)
        group = self._group_of(rank, group, "group")
        with self._lock:
            self.waiting[rank] = group
            self.collectives[rank] = collective

    def waits(self) -> list[Group | None]:
        """For each rank, the group it waits on: the one it said (``note_waiting``), else the
        world group while it is paused at a sync; None if it is not known to wait."""
        with self._lock:
            return [
                w if w is not None or r not in self.paused else self.world
                for r, w in enumerate(self.waiting)
            ]

    def _check(self, rank: int) -> None:
        """``rank`` asks for something: check it, note when, and end its reported wait."""
        self._check_rank(rank)
        self.last_asked[rank] = time.monotonic()
        self.waiting[rank] = None
        self.collectives[rank] = None

    def waiting_in(self) -> list[str | None]:
        """For each rank, the name of the script's collective it said it waits in, if any."""
        with self._lock:
            return list(self.collectives)

    def _check_rank(self, rank: int) -> None:
        if not (isinstance(rank, int) and 0 <= rank < self.size):
            raise ValueError(f"rank {rank!r} is not in 0..{self.size - 1}")


def holding_up(group: Group, rank: int, waits: Sequence[Group | None]) -> list[int]:
    """The ranks that hold up ``rank``'s wait on ``group``: following who waits on whom
    (``GroupGenerator.waits``), the members not waiting on anything.

    A member waiting on the same group waits with ``rank``; one waiting on another group is
    held up by that group's members in turn.

        >>> holding_up((1, 3), 3, [None, (1, 2), None, (1, 3)])
        [2]
    """
    seen = {rank}
    stuck: list[int] = []
    frontier = [tuple(group)]
    while frontier:
        current = frontier.pop()
        for member in current:
            if member in seen:
                continue
            seen.add(member)
            awaited = waits[member]
            if awaited is None:
                stuck.append(member)
            elif tuple(awaited) != current:
                frontier.append(tuple(awaited))
    return sorted(stuck)
