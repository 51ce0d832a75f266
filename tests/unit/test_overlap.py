"""The overlapped path: deadlock freedom in the simulator, OverlappedAverager, its options."""

from __future__ import annotations

import dataclasses
import random
import threading
import time
import types

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from simulate import Deadlock, assert_shared_groups_in_one_order, simulate_overlapped
from test_strategies import FAST, jobs

from horovod_prague.common.binding import Binding
from horovod_prague.common.config import PragueConfig
from horovod_prague.common.group_generator import GroupGenerator, Owed
from horovod_prague.common.overlap import (
    GroupWaitTimeout,
    Overlap,
    OverlappedAverager,
    PendingAverage,
    call_with_deadline,
    integer_share,
    late_collective,
)
from horovod_prague.common.strategies import make_strategy

staleness = st.integers(0, 4)
in_flight = st.integers(1, 3)


@FAST
@given(
    jobs(),
    staleness,
    in_flight,
    st.lists(st.integers(1, 12), min_size=16, max_size=16),
    st.sets(st.integers(1, 12), max_size=3),
    st.randoms(),
)
def test_every_overlapped_interleaving_finishes_without_deadlock(job, s, k, steps, syncs, rnd):
    """Uneven steps per rank, syncs some ranks may finish before, any interleaving."""
    config, topology = job
    gg = GroupGenerator(make_strategy(config, topology))
    history = simulate_overlapped(
        gg, steps[: topology.size], s, pick=rnd.choice, syncs_at=frozenset(syncs), in_flight=k
    )
    for rank, state in enumerate(history):
        assert all(rank in g for g in state.executed)
        assert not state.in_flight
        if s == 0:
            assert state.skipped == state.waits == 0


@FAST
@given(
    jobs(),
    staleness,
    in_flight,
    st.lists(st.integers(1, 30), min_size=16, max_size=16),
    st.lists(st.sampled_from([1, 100]), min_size=16, max_size=16),
    st.randoms(),
)
def test_fast_and_slow_ranks_finish_without_deadlock(job, s, k, steps, speeds, rnd):
    """Ranks of two speeds, so that fast ones reach the staleness bound and wait."""
    config, topology = job

    def pick(movable):
        return rnd.choices(movable, weights=[speeds[r] for r in movable])[0]

    gg = GroupGenerator(make_strategy(config, topology))
    history = simulate_overlapped(
        gg, steps[: topology.size], s, pick=pick, syncs_at=frozenset({4, 13}), in_flight=k
    )
    for rank, state in enumerate(history):
        assert all(rank in g for g in state.executed)
        assert not state.in_flight and state.max_in_flight <= k
        assert state.shared_partner == 0
        assert state.max_skipped_run <= max(s - 1, 0)


@FAST
@given(
    jobs(),
    staleness,
    in_flight,
    st.lists(st.integers(1, 10), min_size=16, max_size=16),
    st.randoms(),
)
def test_members_submit_shared_groups_in_the_same_order(job, s, k, steps, rnd):
    config, topology = job
    gg = GroupGenerator(make_strategy(config, topology))
    history = simulate_overlapped(
        gg, steps[: topology.size], s, pick=rnd.choice, syncs_at=frozenset({3, 6}), in_flight=k
    )
    assert_shared_groups_in_one_order(history, topology.size)


@FAST
@given(jobs(), staleness, in_flight, st.randoms())
def test_a_global_collective_after_each_overlapped_sync_never_deadlocks(job, s, k, rnd):
    config, topology = job
    gg = GroupGenerator(make_strategy(config, topology))
    syncs = frozenset({1, 3, 4, 8})
    history = simulate_overlapped(
        gg,
        [9] * topology.size,
        s,
        pick=rnd.choice,
        syncs_at=syncs,
        collective_after_sync=True,
        in_flight=k,
    )
    world = tuple(range(topology.size))
    assert all(state.executed.count(world) >= len(syncs) for state in history)


@FAST
@given(jobs(), staleness, st.lists(st.integers(1, 12), min_size=16, max_size=16), st.randoms())
def test_one_average_in_flight_and_fewer_than_staleness_steps_without_a_group(job, s, steps, rnd):
    config, topology = job
    gg = GroupGenerator(make_strategy(config, topology))
    history = simulate_overlapped(
        gg, steps[: topology.size], s, pick=rnd.choice, syncs_at=frozenset({2, 5})
    )
    for state in history:
        assert state.max_in_flight <= 1
        assert state.max_skipped_run <= max(s - 1, 0)
        assert state.skipped <= state.steps_done


@FAST
@given(
    jobs(),
    st.integers(1, 4),
    st.integers(2, 3),
    st.lists(st.integers(1, 12), min_size=16, max_size=16),
    st.randoms(),
)
def test_several_averages_in_flight_never_share_a_partner(job, s, k, steps, rnd):
    """With ``in_flight=k`` a rank runs up to k averages at once, none two sharing a member
    besides itself, and steps alone only while k are running, for fewer than ``staleness``
    steps in a row."""
    config, topology = job
    gg = GroupGenerator(make_strategy(config, topology))
    history = simulate_overlapped(
        gg, steps[: topology.size], s, pick=rnd.choice, syncs_at=frozenset({2, 5}), in_flight=k
    )
    for state in history:
        assert state.max_in_flight <= k
        assert state.shared_partner == 0
        assert state.max_skipped_run <= max(s - 1, 0)


def test_a_rank_whose_partner_lags_skips_staleness_minus_one_steps_then_waits():
    """Rank 1 stays behind: rank 0 takes no group for ``staleness - 1`` steps, then waits."""
    gg = ScriptedGG({0: [(0, 1)] * 2, 1: [(0, 1)] * 2})
    order = iter([0] * 4 + [1] * 10 + [0] * 10)
    history = simulate_overlapped(gg, [4, 2], 3, pick=lambda movable: _next_in(order, movable))
    assert history[0].skipped == 2 and history[0].waits == 1
    assert history[0].executed == history[1].executed == [(0, 1), (0, 1)]


def _next_in(order, movable):
    for r in order:
        if r in movable:
            return r
    return movable[0]


class ScriptedGG:
    """A Group Generator that hands each rank a fixed list of groups; syncs never happen."""

    def __init__(self, script: dict[int, list[tuple[int, ...]]]) -> None:
        self.script = {r: list(groups) for r, groups in script.items()}

    def next_group(self, rank):
        return self.script[rank].pop(0) if self.script[rank] else (rank,)

    def sync(self, rank, sync_id):
        return None

    def finish(self, rank):
        left, self.script[rank] = self.script[rank], []
        return Owed(left, 0)


A, B, C = (0, 1), (0, 1, 2), (0, 1, 3)


@pytest.mark.parametrize("s", range(5))
@pytest.mark.parametrize("seed", range(5))
def test_the_simulator_detects_members_meeting_groups_in_different_orders(s, seed):
    """Ranks 0 and 1 meet shared groups in opposite orders: each starts its first, A or C,
    and then waits for it (staleness) or drains it (end of steps) before asking for the next,
    so neither ever submits the one the other waits on."""
    steps = [3, 3, 1, 1]
    in_order = {0: [A, B, C], 1: [A, B, C], 2: [B], 3: [C]}
    history = simulate_overlapped(ScriptedGG(in_order), steps, s, pick=random.Random(seed).choice)
    assert history[0].executed == history[1].executed == [A, B, C]

    reversed_for_1 = {**in_order, 1: [C, B, A]}
    with pytest.raises(Deadlock, match=r"\(0, 1\)"):
        simulate_overlapped(ScriptedGG(reversed_for_1), steps, s, pick=random.Random(seed).choice)


class FakePending(PendingAverage):
    """Ready once ``ready()`` was called more than ``polls`` times (never when None)."""

    def __init__(self, name: str, log: list, polls: int | None = 0) -> None:
        self.name, self.log, self.polls, self.polled = name, log, polls, 0

    def ready(self) -> bool:
        self.polled += 1
        return self.polls is not None and self.polled > self.polls

    def apply(self) -> None:
        assert self.polls is not None and self.polled > self.polls, "applied before ready"
        self.log.append(self.name)


class BlockingBinding(Binding):
    """A Binding whose blocking average only logs what it found in flight and its flag."""

    can_overlap = True

    def __init__(self, log: list, in_flight: int) -> None:
        super().__init__(hvd=None)
        self.log = log
        self.job.runtime = types.SimpleNamespace(
            started=True, rank=0, name=lambda group: str(group)
        )
        self.job.runtime.process_set = lambda group: group
        self.job.averager = OverlappedAverager(staleness=3, timeout=5.0, in_flight=in_flight)

    def tensors(self, source):
        return list(source)

    def scratch(self):
        return [0.0]

    def average(self, tensors, name, process_set, size, overlap=None, share_of=None):
        flag = None if overlap is None else overlap.flag
        self.log.append(("blocking", process_set, self.job.averager.in_flight(), flag))


@pytest.mark.parametrize("in_flight", [1, 2])
def test_partial_allreduce_applies_the_averages_in_flight_first(in_flight):
    """Oldest first, before the blocking collective, which is then not flagged (on the
    process set of one still running, TensorFlow's eager Horovod op refused the second
    collective as a duplicate name; PyTorch corrected the members' difference twice)."""
    log: list = []
    binding = BlockingBinding(log, in_flight)
    binding.job.averager.start(FakePending("a", log, polls=3), (0, 1))
    if in_flight > 1:
        binding.job.averager.start(FakePending("b", log, polls=0), (0, 2))
    binding.partial_allreduce([np.zeros(3)], (0, 1))
    applied = ["a", "b"][:in_flight]
    assert log == [*applied, ("blocking", (0, 1), 0, None if in_flight == 1 else 0.0)]


def test_a_new_average_may_start_when_none_is_in_flight():
    averager = OverlappedAverager(staleness=2, timeout=1.0)
    assert averager.may_start() and not averager.in_flight()
    assert (averager.applied, averager.waits) == (0, 0)


@pytest.mark.parametrize("s", [1, 2, 4])
def test_staleness_minus_one_steps_without_a_group_then_a_wait(s):
    """Staleness 1 waits at the next step: every step averages, one step overlapped."""
    log: list = []
    averager = OverlappedAverager(staleness=s, timeout=1.0)
    pending = FakePending("a", log, polls=s + 4)  # completes during the wait
    averager.start(pending, (0, 1))
    assert [averager.may_start() for _ in range(s - 1)] == [False] * (s - 1)
    assert log == [] and averager.in_flight() and averager.waits == 0
    assert averager.may_start()  # waited for it, applied it: the step starts the next
    assert log == ["a"] and not averager.in_flight()
    assert (averager.applied, averager.waits) == (1, 1)
    assert pending.polled == s + 5


def test_a_completed_average_is_applied_by_the_next_may_start():
    log: list = []
    averager = OverlappedAverager(staleness=3, timeout=1.0)
    averager.start(FakePending("a", log, polls=1), (0, 1))
    assert not averager.may_start()  # first poll: not yet
    assert averager.may_start()  # second poll: completed, applied, no wait
    assert log == ["a"] and not averager.in_flight()
    assert (averager.applied, averager.waits) == (1, 0)
    averager.start(FakePending("b", log), (0, 2))  # the counter of steps starts over
    assert averager.may_start() and log == ["a", "b"]


def test_collect_applies_a_completed_average_and_never_waits():
    log: list = []
    averager = OverlappedAverager(staleness=1, timeout=1.0)
    stuck = FakePending("stuck", log, polls=None)
    averager.start(stuck, (0, 1))
    averager.collect()
    averager.collect()
    assert log == [] and averager.in_flight() and stuck.polled == 2
    stuck.polls = stuck.polled
    averager.collect()
    assert log == ["stuck"] and not averager.in_flight() and averager.applied == 1


def test_drain_waits_for_the_average_in_flight_and_applies_it():
    log: list = []
    averager = OverlappedAverager(staleness=3, timeout=1.0)
    averager.drain()  # nothing in flight: nothing to do
    averager.start(FakePending("a", log, polls=7), (0, 1))
    averager.drain()
    assert log == ["a"] and not averager.in_flight()
    assert (averager.applied, averager.waits) == (1, 0)


def test_only_one_average_may_be_in_flight():
    averager = OverlappedAverager(staleness=2, timeout=1.0)
    averager.start(FakePending("a", [], polls=None), (0, 1))
    with pytest.raises(RuntimeError, match="already in flight"):
        averager.start(FakePending("b", []), (0, 2))


def test_with_two_in_flight_a_step_starts_the_next_average_instead_of_stepping_alone():
    log: list = []
    averager = OverlappedAverager(staleness=1, timeout=1.0, in_flight=2)
    assert averager.may_start()
    averager.start(FakePending("a", log, polls=3), (0, 1))
    assert averager.may_start()  # "a" still running: a second may start
    averager.start(FakePending("b", log, polls=None), (0, 2))
    assert averager.in_flight() == 2 and log == []
    assert averager.may_start()  # two running, "a" the oldest: waited for, applied
    assert log == ["a"] and averager.in_flight() == 1 and averager.waits == 1
    with pytest.raises(RuntimeError, match="already in flight"):
        averager.start(FakePending("c", log), (0, 3))
        averager.start(FakePending("d", log), (0, 4))


def test_with_three_in_flight_and_staleness_four_a_step_goes_alone_only_when_three_run():
    averager = OverlappedAverager(staleness=4, timeout=1.0, in_flight=3)
    started = []
    for step in range(4):
        if averager.may_start():
            averager.start(FakePending(str(step), [], polls=None), (0, 1 + step))
            started.append(step)
    assert started == [0, 1, 2] and averager.in_flight() == 3


def test_make_room_waits_only_for_averages_sharing_a_partner():
    log: list = []
    averager = OverlappedAverager(staleness=2, timeout=1.0, in_flight=2)
    averager.start(FakePending("with 1", log, polls=2), (0, 1))
    averager.make_room((0, 2), rank=0)  # shares only rank 0 itself: no wait
    assert log == [] and averager.waits == 0
    averager.make_room((0, 1, 3), rank=0)  # shares rank 1: waits for it
    assert log == ["with 1"] and averager.in_flight() == 0 and averager.waits == 1


def test_an_average_older_than_one_applied_is_still_applied_whole():
    """Corrections, integer ones included, add up in any order: none is skipped."""
    log: list = []
    averager = OverlappedAverager(staleness=3, timeout=1.0, in_flight=3)
    older = FakePending("older", log, polls=None)
    averager.start(older, (0, 1))
    middle = FakePending("middle", log, polls=None)
    averager.start(middle, (0, 2))
    averager.start(FakePending("newer", log), (0, 3))
    averager.collect()
    older.polls, middle.polls = older.polled, middle.polled
    averager.drain()
    assert log == ["newer", "older", "middle"]


def test_overlap_flags_an_average_started_while_another_is_in_flight():
    assert OverlappedAverager(staleness=1, timeout=1.0).overlap() is None  # one at most
    averager = OverlappedAverager(staleness=1, timeout=1.0, in_flight=3)
    assert averager.overlap() == Overlap(started_during_another=False, damping=1 / 3)
    averager.start(FakePending("a", [], polls=None), (0, 1))
    assert averager.overlap() == Overlap(started_during_another=True, damping=1 / 3)
    assert (averager.overlap().flag, averager.overlap().scale(0.25)) == (1.0, 1 / 3)


class Clock:
    now = 0


class ScalarAverage:
    """A scalar group average on a shared clock: complete ``delay`` steps after its members
    all joined. Each member's correction is scaled as the members agree (``Overlap``)."""

    def __init__(self, group: tuple, values: list[float], clock: Clock, delay: int) -> None:
        self.group, self.values, self.clock, self.delay = group, values, clock, delay
        self.joined: dict[int, tuple[float, float]] = {}  # rank: (snapshot, flag)

    def join(self, rank: int, overlap: Overlap | None) -> PendingAverage:
        self.joined[rank] = (self.values[rank], 0.0 if overlap is None else overlap.flag)
        if len(self.joined) == len(self.group):
            self.done_at = self.clock.now + self.delay
        average = self

        class Member(PendingAverage):
            def ready(self) -> bool:
                return len(average.joined) == len(average.group) and (
                    average.clock.now >= average.done_at
                )

            def apply(self) -> None:
                snapshots, flags = zip(*average.joined.values(), strict=True)
                snapshot = average.joined[rank][0]
                if isinstance(snapshot, int):  # a counter: its share of the sum, whole
                    position = average.group.index(rank)
                    share = integer_share(sum(snapshots), len(snapshots), position)
                    average.values[rank] += share - snapshot
                    return
                mean, mean_flag = sum(snapshots) / len(snapshots), sum(flags) / len(flags)
                scale = 1.0 if overlap is None else overlap.scale(mean_flag)
                average.values[rank] += scale * (mean - snapshot)

        return Member()


def _disagreement_after(
    steps: int, in_flight: int, damped: bool, values: list[float] | None = None
) -> tuple[float, float]:
    """Four ranks in lock step cycle through ``in_flight`` pair divisions ({0,1}{2,3},
    {0,2}{1,3}, then {0,3}{1,2}), so a partner comes back just as its last average completes,
    ``in_flight`` steps after its snapshot. (max |x - mean|, mean) after."""
    values = [1.0, -1.0, -1.0, 1.0] if values is None else values
    clock = Clock()
    averagers = [OverlappedAverager(staleness=1, timeout=1.0, in_flight=in_flight) for _ in values]
    divisions = [((0, 1), (2, 3)), ((0, 2), (1, 3)), ((0, 3), (1, 2))][:in_flight]
    for step in range(steps):
        clock.now = step
        division = divisions[step % in_flight]
        averages = {g: ScalarAverage(g, values, clock, in_flight) for g in division}
        for rank, averager in enumerate(averagers):
            assert averager.may_start()
            group = next(g for g in averages if rank in g)
            averager.make_room(group, rank)
            overlap = averager.overlap()
            if not damped:
                overlap = dataclasses.replace(overlap, damping=1.0)
            averager.start(averages[group].join(rank, overlap), group)
    mean = sum(values) / len(values)
    return max(abs(x - mean) for x in values), mean


@pytest.mark.parametrize("k", [2, 3])
def test_averages_overlapping_along_a_cycle_of_ranks_converge_when_damped(k):
    spread, mean = _disagreement_after(80, in_flight=k, damped=True)
    assert spread < 1e-4 and abs(mean) < 1e-12


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("counts", [[10, -10, -10, 10], [7, 0, 3, 0], [5, 6, 5, 6]])
def test_integer_corrections_along_a_cycle_keep_the_total_and_stay_bounded(k, counts):
    """Counters out of step, corrected whole (``PendingAverage.apply``): the feedback that
    damping cures for floats keeps the disagreement within its initial size and a count of
    rounding, and the total
    count is kept exactly, so the final world average gives every rank the exact count."""
    spread, mean = _disagreement_after(80, in_flight=k, damped=True, values=list(counts))
    initial = sum(counts) / len(counts)
    assert mean == initial and spread <= max(abs(c - initial) for c in counts) + 1


def test_undamped_overlapping_averages_along_a_cycle_of_ranks_never_converge():
    """Why ``Overlap`` damps: the same schedule applied whole keeps the disagreement."""
    spread, mean = _disagreement_after(80, in_flight=2, damped=False)
    assert spread > 0.5 and abs(mean) < 1e-12


@pytest.mark.parametrize("how", ["drain", "staleness"])
def test_an_average_that_never_completes_times_out_naming_its_group(how):
    averager = OverlappedAverager(staleness=2, timeout=0.05)
    averager.start(FakePending("stuck", [], polls=None), (3, 5))
    start = time.monotonic()
    with pytest.raises(GroupWaitTimeout, match=r"group \[3, 5\].*within 0.05 s"):
        if how == "drain":
            averager.drain()
        else:
            assert not averager.may_start()
            averager.may_start()
    assert time.monotonic() - start < 1.0


@pytest.mark.parametrize("bad", [0, -1])
def test_the_averager_needs_staleness_of_at_least_one(bad):
    with pytest.raises(ValueError, match="staleness"):
        OverlappedAverager(staleness=bad, timeout=1.0)
    with pytest.raises(ValueError, match="in_flight"):
        OverlappedAverager(staleness=1, timeout=1.0, in_flight=bad)
    with pytest.raises(ValueError, match="in_flight"):
        PragueConfig(in_flight=bad)


def test_the_default_runs_two_averages_in_flight_at_staleness_one_at_every_size():
    assert PragueConfig().staleness == "auto" and PragueConfig().in_flight == 2
    assert [PragueConfig().staleness_for(n) for n in (2, 4, 5, 8, 64)] == [1, 1, 1, 1, 1]


def test_auto_staleness_with_one_in_flight_is_two_on_small_jobs_one_on_larger():
    one = PragueConfig(in_flight=1)
    assert [one.staleness_for(n) for n in (2, 4, 5, 8, 64)] == [2, 2, 1, 1, 1]
    assert PragueConfig(in_flight=3).staleness_for(4) == 1


@pytest.mark.parametrize("bad", ["1.5", "two", True, ""])
def test_staleness_must_be_auto_or_a_number_of_steps(bad):
    with pytest.raises(ValueError, match="^staleness:"):
        PragueConfig(staleness=bad)


@pytest.mark.parametrize(
    ("kwargs", "env"),
    [({"staleness": -1}, {}), ({}, {"HOROVOD_PRAGUE_STALENESS": "-2"})],
)
def test_negative_staleness_is_rejected(kwargs, env):
    with pytest.raises(ValueError, match="^staleness:"):
        PragueConfig.from_sources(kwargs, env=env)


def test_staleness_from_the_environment_and_keywords_over_it():
    env = {"HOROVOD_PRAGUE_STALENESS": "0"}
    assert PragueConfig.from_sources(env=env).staleness_for(8) == 0
    assert PragueConfig.from_sources({"staleness": 3}, env=env).staleness_for(8) == 3
    assert PragueConfig.from_sources({"staleness": "auto"}, env=env).staleness_for(8) == 1


def test_call_with_deadline_returns_raises_and_gives_up_in_time():
    assert call_with_deadline(lambda: 42, 5.0, lambda: "late") == 42
    with pytest.raises(ZeroDivisionError):
        call_with_deadline(lambda: 1 / 0, 5.0, lambda: "late")
    release = threading.Event()
    start = time.monotonic()
    with pytest.raises(GroupWaitTimeout, match="collective 'g.n1' did not complete"):
        call_with_deadline(lambda: release.wait(30), 0.2, lambda: late_collective("g.n1", 0.2))
    assert time.monotonic() - start < 5
    release.set()


class ReadyAfterPolls(PendingAverage):
    """Ready from its ``polls``-th ``ready()`` call on: waits that do not depend on timing."""

    def __init__(self, polls: int) -> None:
        self.polls = polls

    def ready(self) -> bool:
        self.polls -= 1
        return self.polls <= 0

    def apply(self) -> None:
        pass


def test_waited_s_counts_the_time_spent_waiting_out_staleness_and_nothing_else():
    averager = OverlappedAverager(staleness=1, timeout=5.0)
    averager.start(ReadyAfterPolls(1), (0, 1))
    assert averager.may_start() and averager.waited_s == 0.0  # already complete: no wait
    began = time.perf_counter()
    averager.start(ReadyAfterPolls(5), (0, 1))
    assert averager.may_start()
    took = time.perf_counter() - began
    assert averager.waits == 1 and 0.0 < averager.waited_s <= took
    waited = averager.waited_s
    averager.start(ReadyAfterPolls(5), (0, 1))
    averager.drain()  # a drain outside a step (consensus, finish) is not a staleness wait
    assert averager.waited_s == waited
