"""The overlapped path: deadlock freedom in the simulator, OverlappedAverager, its options."""

from __future__ import annotations

import random
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from simulate import Deadlock, simulate_overlapped
from test_strategies import FAST, jobs

from horovod_prague.common.config import PragueConfig
from horovod_prague.common.group_generator import GroupGenerator
from horovod_prague.common.overlap import GroupWaitTimeout, OverlappedAverager, PendingAverage
from horovod_prague.common.strategies import make_strategy

staleness = st.integers(0, 3)


@FAST
@given(
    jobs(),
    staleness,
    st.lists(st.integers(1, 12), min_size=16, max_size=16),
    st.sets(st.integers(1, 12), max_size=3),
    st.randoms(),
)
def test_every_overlapped_interleaving_finishes_without_deadlock(job, s, steps, syncs, rnd):
    """Uneven steps per rank, syncs some ranks may finish before, any interleaving."""
    config, topology = job
    gg = GroupGenerator(make_strategy(config, topology))
    history = simulate_overlapped(
        gg, steps[: topology.size], s, pick=rnd.choice, syncs_at=frozenset(syncs)
    )
    for rank, state in enumerate(history):
        assert all(rank in g for g in state.executed)
        assert not state.in_flight


@FAST
@given(jobs(), staleness, st.lists(st.integers(1, 10), min_size=16, max_size=16), st.randoms())
def test_members_submit_shared_groups_in_the_same_order(job, s, steps, rnd):
    config, topology = job
    gg = GroupGenerator(make_strategy(config, topology))
    history = simulate_overlapped(
        gg, steps[: topology.size], s, pick=rnd.choice, syncs_at=frozenset({3, 6})
    )
    for a in range(topology.size):
        for b in range(a + 1, topology.size):
            shared_a = [g for g in history[a].executed if b in g]
            shared_b = [g for g in history[b].executed if a in g]
            assert shared_a == shared_b


@FAST
@given(jobs(), staleness, st.randoms())
def test_a_global_collective_after_each_overlapped_sync_never_deadlocks(job, s, rnd):
    config, topology = job
    gg = GroupGenerator(make_strategy(config, topology))
    syncs = frozenset({1, 3, 4, 8})
    history = simulate_overlapped(
        gg, [9] * topology.size, s, pick=rnd.choice, syncs_at=syncs, collective_after_sync=True
    )
    world = tuple(range(topology.size))
    assert all(state.executed.count(world) >= len(syncs) for state in history)


@FAST
@given(jobs(), staleness, st.lists(st.integers(1, 12), min_size=16, max_size=16), st.randoms())
def test_no_rank_has_more_than_staleness_plus_one_averages_in_flight(job, s, steps, rnd):
    config, topology = job
    gg = GroupGenerator(make_strategy(config, topology))
    history = simulate_overlapped(
        gg, steps[: topology.size], s, pick=rnd.choice, syncs_at=frozenset({2, 5})
    )
    assert all(state.max_in_flight <= s + 1 for state in history)


class ScriptedGG:
    """A Group Generator that hands each rank a fixed list of groups; syncs never happen."""

    def __init__(self, script: dict[int, list[tuple[int, ...]]]) -> None:
        self.script = {r: list(groups) for r, groups in script.items()}

    def next_group(self, rank):
        return self.script[rank].pop(0)

    def sync(self, rank, sync_id):
        return None

    def finish(self, rank):
        return []


A, B, C = (0, 1), (0, 1, 2), (0, 1, 3)


@pytest.mark.parametrize("seed", range(5))
def test_the_simulator_detects_members_meeting_groups_in_different_orders(seed):
    """Ranks 0 and 1 meet three shared groups in opposite orders: with staleness 1 each submits
    two and waits for its oldest, which the other submits last."""
    steps = [3, 3, 1, 1]
    in_order = {0: [A, B, C], 1: [A, B, C], 2: [B], 3: [C]}
    history = simulate_overlapped(ScriptedGG(in_order), steps, 1, pick=random.Random(seed).choice)
    assert history[0].executed == history[1].executed == [A, B, C]

    reversed_for_1 = {**in_order, 1: [C, B, A]}
    with pytest.raises(Deadlock, match=r"\(0, 1\)"):
        simulate_overlapped(ScriptedGG(reversed_for_1), steps, 1, pick=random.Random(seed).choice)
    # Staleness 2 leaves room to submit all three first: the same script then completes.
    simulate_overlapped(ScriptedGG(reversed_for_1), steps, 2, pick=random.Random(seed).choice)


class FakePending(PendingAverage):
    """Completes after ``polls`` calls to ``ready()`` (never when None); logs what it applied."""

    def __init__(self, name: str, log: list, polls: int | None = 0) -> None:
        self.name, self.log, self.polls, self.polled = name, log, polls, 0

    def ready(self) -> bool:
        self.polled += 1
        return self.polls is not None and self.polled > self.polls

    def apply(self, mix: float) -> None:
        assert self.polls is not None and self.polled > self.polls, "applied before ready"
        self.log.append((self.name, mix))


def test_completed_averages_are_applied_oldest_first_with_the_mix():
    log: list = []
    averager = OverlappedAverager(staleness=2, mix=0.25, timeout=1.0)
    a, b = FakePending("a", log, polls=None), FakePending("b", log)
    averager.submit(a, (0, 1))
    averager.submit(b, (0, 2))
    averager.collect()
    assert log == [] and averager.in_flight() == 2  # b is done, but waits behind a
    a.polls = a.polled
    averager.collect()
    assert log == [("a", 0.25), ("b", 0.25)] and averager.in_flight() == 0
    assert averager.applied == 2


def test_submit_waits_only_when_more_than_staleness_are_in_flight():
    log: list = []
    averager = OverlappedAverager(staleness=2, mix=0.5, timeout=0.05)
    first, second = FakePending("1", log, polls=None), FakePending("2", log, polls=None)
    averager.submit(first, (0, 1))
    averager.submit(second, (0, 1))
    assert averager.in_flight() == 2 and log == []
    assert first.polled <= 2  # only looked at, never waited for
    first.polls = first.polled + 5  # completes after a few polls of the wait
    averager.submit(FakePending("3", log, polls=None), (0, 2))
    assert log == [("1", 0.5)] and averager.in_flight() == 2
    assert first.polled > first.polls


def test_drain_applies_everything_in_flight():
    log: list = []
    averager = OverlappedAverager(staleness=3, mix=1.0, timeout=1.0)
    for name, polls in (("a", 3), ("b", 0), ("c", 7)):
        averager.submit(FakePending(name, log, polls), (0, 1))
    averager.drain()
    assert log == [("a", 1.0), ("b", 1.0), ("c", 1.0)] and averager.in_flight() == 0


def test_an_average_that_never_completes_times_out_naming_its_group():
    averager = OverlappedAverager(staleness=1, mix=0.5, timeout=0.05)
    averager.submit(FakePending("stuck", [], polls=None), (3, 5))
    start = time.monotonic()
    with pytest.raises(GroupWaitTimeout, match=r"group \[3, 5\].*within 0.05 s"):
        averager.drain()
    assert time.monotonic() - start < 1.0


@pytest.mark.parametrize("bad", [0, -1])
def test_the_averager_needs_staleness_of_at_least_one(bad):
    with pytest.raises(ValueError, match="staleness"):
        OverlappedAverager(staleness=bad, mix=0.5, timeout=1.0)


def test_staleness_and_mix_defaults():
    cfg = PragueConfig()
    assert (cfg.staleness, cfg.mix) == (2, 0.0)
    assert cfg.mix_weight() == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    ("staleness", "mix", "weight"),
    [(0, 0.0, 1.0), (1, 0.0, 0.5), (3, 0.0, 0.25), (3, 0.7, 0.7), (0, 1.0, 1.0)],
)
def test_mix_weight_is_mix_or_one_over_staleness_plus_one(staleness, mix, weight):
    assert PragueConfig(staleness=staleness, mix=mix).mix_weight() == pytest.approx(weight)


@pytest.mark.parametrize(
    ("kwargs", "env", "message"),
    [
        ({"staleness": -1}, {}, "^staleness:"),
        ({}, {"HOROVOD_PRAGUE_STALENESS": "-2"}, "^staleness:"),
        ({"mix": 1.5}, {}, "^mix:"),
        ({"mix": -0.1}, {}, "^mix:"),
        ({}, {"HOROVOD_PRAGUE_MIX": "2"}, "^mix:"),
        ({}, {"HOROVOD_PRAGUE_MIX": "half"}, "HOROVOD_PRAGUE_MIX: expected float"),
    ],
)
def test_bad_staleness_and_mix_are_rejected(kwargs, env, message):
    with pytest.raises(ValueError, match=message):
        PragueConfig.from_sources(kwargs, env=env)


def test_staleness_and_mix_from_the_environment():
    env = {"HOROVOD_PRAGUE_STALENESS": "0", "HOROVOD_PRAGUE_MIX": "0.3"}
    cfg = PragueConfig.from_sources(env=env)
    assert (cfg.staleness, cfg.mix) == (0, 0.3)
    assert PragueConfig.from_sources({"staleness": 3}, env=env).staleness == 3
