"""Run a GroupGenerator the way ranks would, with blocking groups, on one thread.

Each rank does ``steps[rank]`` steps; a step asks for a group and then waits until every member
of that group has reached it. At the end a rank calls ``finish`` and must still run the groups
returned. ``order`` picks which runnable rank moves next, so tests can drive any interleaving.
With ``collective_after_sync`` a rank that reached a sync then waits in a ``Barrier`` of all
ranks, as a script's own global Horovod collective after it would (the drop-in's guard).
A deadlock (ranks left waiting and no group can complete) raises ``Deadlock``.
"""

from __future__ import annotations

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
