"""Run a GroupGenerator the way ranks would, with blocking groups, on one thread.

Each rank does ``steps[rank]`` steps; a step asks for a group and then waits until every member
of that group has reached it. At the end a rank calls ``finish`` and must still run the groups
returned. ``order`` picks which runnable rank moves next, so tests can drive any interleaving.
With ``collective_after_sync`` a rank that reached a sync then waits in a ``Barrier`` of all
ranks, as a script's own global Horovod collective after it would (the drop-in's guard).
A deadlock (ranks left waiting and no group can complete) raises ``Deadlock``.

``simulate_overlapped`` does the same for the overlapped path (``horovod_prague.common.overlap``
and ``Binding.exchange``): a step submits its group's average and goes on, waiting for the
oldest only while more than ``staleness`` are in flight.
"""

from __future__ import annotations

import collections
import dataclasses
import random
from collections.abc import Callable

from horovod_prague.common.group_generator import GroupGenerator
from horovod_prague.common.strategies import Group


class Deadlock(AssertionError):
    pass


@dataclasses.dataclass(frozen=True)
class Barrier:
    sync_id: int
    members: Group


@dataclasses.dataclass
class RankState:
    steps_left: int
    pending: list[Group | Barrier] = dataclasses.field(default_factory=list)
    waiting: Group | Barrier | None = None
    finished: bool = False
    executed: list[Group] = dataclasses.field(default_factory=list)


def simulate(
    gg: GroupGenerator,
    steps: list[int],
    pick: Callable[[list[int]], int] | None = None,
    syncs_at: frozenset[int] = frozenset(),
    collective_after_sync: bool = False,
) -> list[RankState]:
    """Drive ``gg`` until every rank is done; returns each rank's history."""
    rng = random.Random(0)
    pick = pick or rng.choice
    ranks = [RankState(s) for s in steps]
    done_steps = [0] * len(steps)
    sync_ids = [0] * len(steps)
    while True:
        _complete_groups(ranks)
        movable = [r for r, s in enumerate(ranks) if s.waiting is None and not _done(s)]
        if not movable:
            stuck = [r for r, s in enumerate(ranks) if not _done(s)]
            if stuck:
                raise Deadlock(f"ranks {stuck} wait on {[ranks[r].waiting for r in stuck]}")
            return ranks
        r = pick(movable)
        s = ranks[r]
        if s.pending:
            s.waiting = s.pending.pop(0)
        elif s.steps_left > 0:
            s.steps_left -= 1
            done_steps[r] += 1
            s.waiting = gg.next_group(r)
            if done_steps[r] in syncs_at:
                sync_ids[r] += 1
                more = gg.sync(r, sync_ids[r])
                s.pending.extend(more or [])
                if collective_after_sync:
                    s.pending.append(Barrier(sync_ids[r], tuple(range(len(ranks)))))
        elif not s.finished:
            s.finished = True
            s.pending.extend(gg.finish(r))


def _done(s: RankState) -> bool:
    return s.finished and not s.pending and s.waiting is None


def _complete_groups(ranks: list[RankState]) -> None:
    progress = True
    while progress:
        progress = False
        for s in ranks:
            group = s.waiting
            if group is None:
                continue
            members = group.members if isinstance(group, Barrier) else group
            if len(members) == 1 or all(ranks[m].waiting == group for m in members):
                for m in members:
                    if not isinstance(group, Barrier):
                        ranks[m].executed.append(group)
                    ranks[m].waiting = None
                progress = True


Occurrence = tuple[Group | Barrier, int]
"""The k-th submission of a group (or barrier): the same collective on every member."""

DRAIN, SYNC, FINISH = "drain", "sync", "finish"


@dataclasses.dataclass
class OverlapState:
    """One rank in ``simulate_overlapped``."""

    steps_left: int
    steps_done: int = 0
    syncs: int = 0
    # DRAIN, SYNC, FINISH, or (group or barrier, blocking): what the rank does next.
    todo: list[str | tuple[Group | Barrier, bool]] = dataclasses.field(default_factory=list)
    in_flight: collections.deque[Occurrence] = dataclasses.field(default_factory=collections.deque)
    limit: int | None = None  # waits for the oldest while more than this many are in flight
    blocked_on: Occurrence | None = None  # waits in a blocking collective until it completes
    submitted: collections.Counter[Group | Barrier] = dataclasses.field(
        default_factory=collections.Counter
    )
    finished: bool = False
    executed: list[Group] = dataclasses.field(default_factory=list)
    max_in_flight: int = 0

    def waiting(self) -> bool:
        return self.limit is not None or self.blocked_on is not None

    def done(self) -> bool:
        return self.finished and not self.todo and not self.waiting()


def simulate_overlapped(
    gg: GroupGenerator,
    steps: list[int],
    staleness: int,
    pick: Callable[[list[int]], int] | None = None,
    syncs_at: frozenset[int] = frozenset(),
    collective_after_sync: bool = False,
) -> list[OverlapState]:
    """Drive ``gg`` with overlapped group averages until every rank is done.

    A group step submits ``next_group``'s average, then waits while more than ``staleness``
    are in flight (0: until it completed). A sync step instead drains, calls ``sync`` and runs
    the owed groups as ``Binding._run_owed`` does; the end of the steps drains, calls
    ``finish`` and runs its groups the same way. An occurrence completes once every member
    submitted it. Returns each rank's history.
    """
    pick = pick or random.Random(0).choice
    world = tuple(range(len(steps)))
    ranks = [OverlapState(n) for n in steps]

    def run_owed(groups: list[Group]) -> list[str | tuple[Group | Barrier, bool]]:
        todo: list[str | tuple[Group | Barrier, bool]] = []
        for group in groups:
            todo += [DRAIN, (group, True)] if len(group) == len(world) else [(group, False)]
        return [*todo, DRAIN]

    while True:
        for s in ranks:
            _advance(ranks, s)
        movable = [r for r, s in enumerate(ranks) if not s.waiting() and not s.done()]
        if not movable:
            stuck = {r: _waits_on(ranks, s) for r, s in enumerate(ranks) if not s.done()}
            if stuck:
                raise Deadlock(f"ranks wait on (occurrence, ranks yet to submit it): {stuck}")
            return ranks
        r = pick(movable)
        s = ranks[r]
        if s.todo:
            action = s.todo.pop(0)
            if action == DRAIN:
                s.limit = 0
            elif action == SYNC:
                groups = gg.sync(r, s.syncs)
                s.todo[:0] = run_owed(groups) if groups is not None else []
                if collective_after_sync:
                    s.todo.append((Barrier(s.syncs, world), True))
            elif action == FINISH:
                s.todo[:0] = run_owed(gg.finish(r))
            else:
                _submit(s, *action, staleness)
        elif s.steps_left > 0:
            s.steps_left -= 1
            s.steps_done += 1
            if s.steps_done in syncs_at:
                s.syncs += 1
                s.todo = [DRAIN, SYNC]
            else:
                _submit(s, gg.next_group(r), False, staleness)
        else:
            s.finished = True
            s.todo = [DRAIN, FINISH]


def _members(key: Group | Barrier) -> Group:
    return key.members if isinstance(key, Barrier) else key


def _submit(s: OverlapState, key: Group | Barrier, blocking: bool, staleness: int) -> None:
    if len(_members(key)) < 2:
        return  # a group of one averages with nobody: nothing is submitted
    s.submitted[key] += 1
    occurrence = (key, s.submitted[key])
    if not isinstance(key, Barrier):
        s.executed.append(key)
    if blocking:
        s.blocked_on = occurrence
    else:
        s.in_flight.append(occurrence)
        s.max_in_flight = max(s.max_in_flight, len(s.in_flight))
        s.limit = staleness


def _missing(ranks: list[OverlapState], occurrence: Occurrence) -> list[int]:
    key, k = occurrence
    return [m for m in _members(key) if ranks[m].submitted[key] < k]


def _advance(ranks: list[OverlapState], s: OverlapState) -> None:
    """Retire completed averages, oldest first, and end the waits they satisfy."""
    while s.in_flight and not _missing(ranks, s.in_flight[0]):
        s.in_flight.popleft()
    if s.limit is not None and len(s.in_flight) <= s.limit:
        s.limit = None
    if s.blocked_on is not None and not _missing(ranks, s.blocked_on):
        s.blocked_on = None


def _waits_on(ranks: list[OverlapState], s: OverlapState) -> tuple[Occurrence, list[int]] | None:
    occurrence = s.blocked_on or (s.in_flight[0] if s.in_flight else None)
    return None if occurrence is None else (occurrence, _missing(ranks, occurrence))
