"""Run a GroupGenerator the way ranks would, with blocking groups, on one thread.

Each rank does ``steps[rank]`` steps; a step asks for a group and then waits until every member
of that group has reached it. At the end a rank calls ``finish`` and must still run the groups
returned. ``order`` picks which runnable rank moves next, so tests can drive any interleaving.
With ``collective_after_sync`` a rank that reached a sync then waits in a ``Barrier`` of all
ranks, as a script's own global Horovod collective after it would (the drop-in's guard).
With ``collectives_at`` the members of a process set wait in a ``Barrier`` of theirs after
a given step, as a script's collective on that set would, after a ``settle`` (the guard's)
unless ``settle`` is False.
A deadlock (ranks left waiting and no group can complete) raises ``Deadlock``.

``simulate_overlapped`` does the same for the overlapped path (``horovod_prague.common.overlap``
and ``Binding.exchange``): at most ``in_flight`` group averages are in flight per rank, never
two sharing a member besides the rank; while that many are, a step takes no group, until the
oldest has run ``staleness`` steps: then the rank waits for it.
"""

from __future__ import annotations

import collections
import dataclasses
import random
from collections.abc import Callable

from horovod_prague.common.group_generator import GroupGenerator, Owed
from horovod_prague.common.strategies import Group


def to_run(owed: Owed, world: Group) -> list[Group]:
    """What a rank runs for ``owed``, in order: its groups, then the world group per sync."""
    return [*owed.groups, *[world] * owed.world_averages]


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
    joined: bool = False,
    collectives_at: dict[int, Group] | None = None,
    settle: bool = True,
) -> list[RankState]:
    """Drive ``gg`` until every rank is done; returns each rank's history. With ``joined``,
    a rank that is done takes part in every barrier, as a rank in Horovod's ``join`` does
    in the script's collectives. ``collectives_at``: after its step k, each member of
    ``collectives_at[k]`` waits in a barrier of those members."""
    collectives_at = collectives_at or {}
    rng = random.Random(0)
    pick = pick or rng.choice
    ranks = [RankState(s) for s in steps]
    done_steps = [0] * len(steps)
    sync_ids = [0] * len(steps)
    while True:
        _complete_groups(ranks, joined)
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
                s.pending.extend(to_run(gg.sync(r, sync_ids[r]), gg.world))
                if collective_after_sync:
                    s.pending.append(Barrier(sync_ids[r], tuple(range(len(ranks)))))
            members = collectives_at.get(done_steps[r], ())
            if r in members:
                if settle:
                    s.pending.extend(to_run(gg.settle(r, members), gg.world))
                s.pending.append(Barrier(-done_steps[r], members))
        elif not s.finished:
            s.finished = True
            owed = gg.finish(r)
            s.pending.extend(to_run(owed, gg.world))


def _done(s: RankState) -> bool:
    return s.finished and not s.pending and s.waiting is None


def _complete_groups(ranks: list[RankState], joined: bool = False) -> None:
    progress = True
    while progress:
        progress = False
        for s in ranks:
            group = s.waiting
            if group is None:
                continue
            members = group.members if isinstance(group, Barrier) else group
            in_it = [
                ranks[m].waiting == group
                or (joined and isinstance(group, Barrier) and _done(ranks[m]))
                for m in members
            ]
            if len(members) == 1 or all(in_it):
                for m in members:
                    if not isinstance(group, Barrier):
                        ranks[m].executed.append(group)
                    ranks[m].waiting = None
                progress = True


Occurrence = tuple[Group | Barrier, int]
"""The k-th submission of a group (or barrier): the same collective on every member."""

# What a rank does next, besides the blocking collectives (a group or barrier) in its todo list:
# decide whether this step starts an average (after a staleness wait), start one on a group
# (after waiting for an average in flight that shares a member with it), wait until nothing
# is in flight, reach a sync, finish.
DECIDE, DRAIN, SYNC, FINISH = "decide", "drain", "sync", "finish"


@dataclasses.dataclass(frozen=True)
class Start:
    group: Group


Action = str | Group | Barrier | Start


@dataclasses.dataclass
class Flight:
    occurrence: Occurrence
    started: int  # the step that started it


@dataclasses.dataclass
class OverlapState:
    """One rank in ``simulate_overlapped``."""

    steps_left: int
    steps_done: int = 0
    syncs: int = 0
    todo: list[Action] = dataclasses.field(default_factory=list)
    in_flight: list[Flight] = dataclasses.field(default_factory=list)  # started, not applied
    blocked_on: Occurrence | None = None  # waits until this occurrence completes
    submitted: collections.Counter[Group | Barrier] = dataclasses.field(
        default_factory=collections.Counter
    )
    finished: bool = False
    executed: list[Group] = dataclasses.field(default_factory=list)  # groups submitted, in order
    max_in_flight: int = 0  # the most averages and collectives this rank had running at once
    shared_partner: int = 0  # averages started while another in flight shared a member
    skipped: int = 0  # steps that took no group (their average still in flight)
    max_skipped_run: int = 0  # the most such steps in a row
    skipped_run: int = 0
    waits: int = 0  # times a step waited for its average in flight (the staleness bound)

    def waiting(self) -> bool:
        return self.blocked_on is not None

    def done(self) -> bool:
        return self.finished and not self.todo and not self.waiting()


def simulate_overlapped(
    gg: GroupGenerator,
    steps: list[int],
    staleness: int,
    pick: Callable[[list[int]], int] | None = None,
    syncs_at: frozenset[int] = frozenset(),
    collective_after_sync: bool = False,
    in_flight: int = 1,
) -> list[OverlapState]:
    """Drive ``gg`` with overlapped group averages until every rank is done.

    A group step applies the averages in flight that completed. With fewer than ``in_flight``
    in flight, it asks ``next_group``, waits for any average in flight that shares a member with
    that group, and starts the group's average; otherwise it takes no group, unless the oldest
    started ``staleness`` steps ago: then it waits for it and decides again. ``staleness=0``:
    every group step asks, submits and waits until complete. A sync step drains, calls ``sync``
    and runs the owed groups blocking, as ``Binding.average_model`` does; the end of the steps
    drains, calls ``finish`` and runs its groups the same way. An occurrence completes once
    every member submitted it. Returns each rank's history.
    """
    pick = pick or random.Random(0).choice
    world = tuple(range(len(steps)))
    ranks = [OverlapState(n) for n in steps]

    def applied(s: OverlapState) -> None:
        s.in_flight = [f for f in s.in_flight if _missing(ranks, f.occurrence)]

    def decide(r: int) -> None:
        s = ranks[r]
        applied(s)
        if len(s.in_flight) < in_flight:
            s.skipped_run = 0
            start(r, gg.next_group(r))
        elif s.steps_done - s.in_flight[0].started >= staleness:
            s.waits += 1
            s.blocked_on = s.in_flight[0].occurrence
            s.todo = [DECIDE]
        else:
            s.skipped += 1
            s.skipped_run += 1
            s.max_skipped_run = max(s.max_skipped_run, s.skipped_run)

    def start(r: int, group: Group) -> None:
        s = ranks[r]
        applied(s)
        others = set(group) - {r}
        sharing = [f for f in s.in_flight if others.intersection(f.occurrence[0])]
        if sharing:
            s.blocked_on = sharing[0].occurrence
            s.todo = [Start(group)]
            return
        occurrence = _submit(s, group)
        if occurrence is None:
            return
        if staleness == 0:
            s.blocked_on = occurrence
        else:
            s.in_flight.append(Flight(occurrence, s.steps_done))

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
            if action == DECIDE:
                decide(r)
            elif isinstance(action, Start):
                start(r, action.group)
            elif action == DRAIN:
                applied(s)
                if s.in_flight:
                    s.blocked_on = s.in_flight[0].occurrence
                    s.todo.insert(0, DRAIN)
            elif action == SYNC:
                s.todo[:0] = to_run(gg.sync(r, s.syncs), world)
                if collective_after_sync:
                    s.todo.append(Barrier(s.syncs, world))
            elif action == FINISH:
                owed = gg.finish(r)
                s.todo[:0] = to_run(owed, world)
            else:
                assert isinstance(action, (tuple, Barrier))
                s.blocked_on = _submit(s, action)
        elif s.steps_left > 0:
            s.steps_left -= 1
            s.steps_done += 1
            if s.steps_done in syncs_at:
                s.syncs += 1
                s.skipped_run = 0
                s.todo = [DRAIN, SYNC]
                continue
            decide(r)
        else:
            s.finished = True
            s.todo = [DRAIN, FINISH]


def _members(key: Group | Barrier) -> Group:
    return key.members if isinstance(key, Barrier) else key


def _submit(s: OverlapState, key: Group | Barrier) -> Occurrence | None:
    """Submit ``key``'s next occurrence; a group of one averages with nobody (None)."""
    if len(_members(key)) < 2:
        return None
    s.submitted[key] += 1
    if not isinstance(key, Barrier):
        s.executed.append(key)
    s.max_in_flight = max(s.max_in_flight, 1 + len(s.in_flight))
    members = set(_members(key))
    s.shared_partner += any(len(members.intersection(f.occurrence[0])) > 1 for f in s.in_flight)
    return key, s.submitted[key]


def _missing(ranks: list[OverlapState], occurrence: Occurrence) -> list[int]:
    key, k = occurrence
    return [m for m in _members(key) if ranks[m].submitted[key] < k]


def _advance(ranks: list[OverlapState], s: OverlapState) -> None:
    """End the wait of ``s`` once what it waits on completed; a waited-for average is applied."""
    if s.blocked_on is not None and not _missing(ranks, s.blocked_on):
        s.in_flight = [f for f in s.in_flight if f.occurrence != s.blocked_on]
        s.blocked_on = None


def _waits_on(ranks: list[OverlapState], s: OverlapState) -> tuple[Occurrence, list[int]] | None:
    occurrence = s.blocked_on or (s.in_flight[0].occurrence if s.in_flight else None)
    return None if occurrence is None else (occurrence, _missing(ranks, occurrence))


def assert_shared_groups_in_one_order(history: list, size: int) -> None:
    """Every pair of ranks ran (or submitted) the groups they share in the same order."""
    for a in range(size):
        for b in range(a + 1, size):
            shared_a = [g for g in history[a].executed if b in g]
            shared_b = [g for g in history[b].executed if a in g]
            assert shared_a == shared_b, (a, b)
