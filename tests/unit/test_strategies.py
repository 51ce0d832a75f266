"""Group-generation strategies and the Group Generator: pure Python, milliseconds per test."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simulate import assert_shared_groups_in_one_order, simulate

from horovod_prague.common.config import PragueConfig
from horovod_prague.common.group_generator import GroupGenerator, Owed
from horovod_prague.common.strategies import (
    STRATEGY_CLASSES,
    SmartStrategy,
    StaticStrategy,
    make_strategy,
)
from horovod_prague.common.strategies.divisions import is_connected
from horovod_prague.common.topology import Topology

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def jobs(draw, strategies=tuple(STRATEGY_CLASSES)):
    """A topology, a strategy that fits it, and its options."""
    # Nodes of different sizes too, as horovodrun -H a:4,b:2 starts.
    node_sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    if sum(node_sizes) < 2:
        node_sizes = [2]
    topology = Topology.of_nodes(node_sizes)
    size = topology.size
    name = draw(st.sampled_from(strategies))
    if name == "adpsgd":
        k = 2
    elif name == "static":
        k = draw(st.sampled_from([d for d in range(2, size + 1) if size % d == 0]))
    else:
        k = draw(st.integers(2, size))
    config = PragueConfig(
        strategy=name,
        group_size=k,
        pool_size=draw(st.integers(2, 4)),
        seed=draw(st.integers(0, 10_000)),
        threshold=draw(st.integers(0, 4)),
    )
    return config, topology


@FAST
@given(jobs(), st.data())
def test_a_generation_never_puts_a_rank_in_two_groups(job, data):
    config, topology = job
    strategy = make_strategy(config, topology)
    for _ in range(20):
        counts = data.draw(
            st.lists(st.integers(0, 30), min_size=topology.size, max_size=topology.size)
        )
        active = frozenset(data.draw(st.sets(st.integers(0, topology.size - 1), min_size=1)))
        requester = data.draw(st.sampled_from(sorted(active)))
        groups = strategy.generate(requester, counts, active)
        members = [r for g in groups for r in g]
        assert len(members) == len(set(members)), groups
        assert set(members) <= active
        assert any(requester in g for g in groups)
        assert all(g == tuple(sorted(g)) for g in groups)


@FAST
@given(jobs(), st.lists(st.integers(1, 12), min_size=16, max_size=16), st.randoms())
def test_every_interleaving_finishes_without_deadlock(job, steps, rnd):
    """Uneven steps per rank, random interleavings, syncs: every rank runs all its groups."""
    config, topology = job
    gg = GroupGenerator(make_strategy(config, topology))
    history = simulate(gg, steps[: topology.size], pick=rnd.choice)
    for rank, state in enumerate(history):
        assert all(rank in g for g in state.executed)


@FAST
@given(jobs(), st.randoms())
def test_members_run_shared_groups_in_the_same_order(job, rnd):
    config, topology = job
    gg = GroupGenerator(make_strategy(config, topology))
    history = simulate(gg, [8] * topology.size, pick=rnd.choice, syncs_at=frozenset({3, 6}))
    assert_shared_groups_in_one_order(history, topology.size)


@FAST
@given(jobs(), st.randoms())
def test_a_global_collective_after_each_sync_never_deadlocks(job, rnd):
    """Ranks in the script's own global collective are never wanted in a group meanwhile."""
    config, topology = job
    gg = GroupGenerator(make_strategy(config, topology))
    history = simulate(
        gg,
        [9] * topology.size,
        pick=rnd.choice,
        syncs_at=frozenset({1, 3, 4, 8}),
        collective_after_sync=True,
    )
    world = tuple(range(topology.size))
    assert all(state.executed.count(world) >= 4 for state in history)


@FAST
@given(jobs(strategies=("smart",)), st.data())
def test_smart_threshold_rule(job, data):
    config, topology = job
    strategy = make_strategy(config, topology)
    counts = data.draw(st.lists(st.integers(0, 20), min_size=topology.size, max_size=topology.size))
    requester = data.draw(st.integers(0, topology.size - 1))
    groups = strategy.generate(requester, counts, frozenset(range(topology.size)))
    if config.threshold:
        for group in groups:
            for w in group:
                assert w == requester or counts[w] > counts[requester] - config.threshold


@FAST
@given(jobs(strategies=("smart", "random", "static", "adpsgd")))
def test_groups_over_many_generations_connect_all_ranks(job):
    config, topology = job
    gg = GroupGenerator(make_strategy(config, topology))
    history = simulate(gg, [60] * topology.size)
    assert is_connected(topology.size, (g for s in history for g in s.executed))


@FAST
@given(jobs())
def test_same_seed_same_groups(job):
    config, topology = job
    runs = []
    for _ in range(2):
        gg = GroupGenerator(make_strategy(config, topology))
        runs.append([s.executed for s in simulate(gg, [10] * topology.size)])
    assert runs[0] == runs[1]


@FAST
@given(jobs())
def test_process_sets_per_rank_are_bounded_by_the_pool(job):
    config, topology = job
    strategy = make_strategy(config, topology)
    bound = 4 if config.strategy == "static" else config.pool_size
    assert strategy.sets_per_rank() <= bound
    for group in strategy.groups():
        assert 2 <= len(group) < topology.size


def test_smart_keeps_a_straggler_out_of_fast_groups():
    strategy = SmartStrategy(Topology(4, 4), group_size=2, pool_size=3, seed=1, threshold=2)
    for requester in (0, 1, 2):
        for _ in range(20):
            groups = strategy.generate(requester, [10, 10, 10, 2], frozenset(range(4)))
            assert all(3 not in g for g in groups if requester in g)
            assert all(3 not in g for g in groups)
    # The straggler itself still meets the others when it asks.
    groups = strategy.generate(3, [10, 10, 10, 2], frozenset(range(4)))
    assert [g for g in groups if 3 in g][0] != (3,)


def test_smart_gives_no_group_to_a_rank_that_still_owes_one():
    strategy = SmartStrategy(Topology(4, 4), group_size=2, pool_size=3, seed=1, threshold=2)
    for _ in range(20):
        groups = strategy.generate(0, [5, 5, 5, 5], frozenset(range(4)), backlog=[0, 1, 0, 0])
        assert all(1 not in g for g in groups)


def test_threshold_zero_turns_the_rule_off():
    strategy = SmartStrategy(Topology(2, 2), group_size=2, pool_size=2, seed=0, threshold=0)
    assert strategy.generate(0, [100, 0], frozenset({0, 1}), backlog=[0, 3]) == [(0, 1)]


STATIC_SCHEDULES = {
    (2, 2, 2): [[(0, 1), (2, 3)], [(0, 2), (1, 3)]],
    (2, 4, 2): [
        [(0, 1), (2, 3), (4, 5), (6, 7)],
        [(0, 4), (1, 5), (2, 6), (3, 7)],
        [(0, 3), (1, 2), (4, 7), (5, 6)],
        [(0, 4), (1, 5), (2, 6), (3, 7)],
    ],
    (2, 4, 4): [[(0, 1, 2, 3), (4, 5, 6, 7)], [(0, 1, 4, 5), (2, 3, 6, 7)]],
    (4, 4, 2): [
        [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 11), (12, 13), (14, 15)],
        [(0, 4), (1, 13), (2, 6), (3, 15), (5, 9), (7, 11), (8, 12), (10, 14)],
        [(0, 3), (1, 2), (4, 7), (5, 6), (8, 11), (9, 10), (12, 15), (13, 14)],
        [(0, 12), (1, 5), (2, 14), (3, 7), (4, 8), (6, 10), (9, 13), (11, 15)],
    ],
    (4, 4, 4): [
        [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15)],
        [(0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15)],
    ],
    (1, 4, 2): [[(0, 1), (2, 3)], [(0, 3), (1, 2)]],
}


@pytest.mark.parametrize(("nodes", "local", "k"), list(STATIC_SCHEDULES))
def test_static_schedules(nodes, local, k):
    strategy = StaticStrategy(Topology(nodes * local, local), k, pool_size=3, seed=0)
    assert [list(d) for d in strategy.schedule] == STATIC_SCHEDULES[nodes, local, k]


@pytest.mark.parametrize("nodes", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("local", [1, 2, 3, 4, 8])
def test_every_static_schedule_is_a_connected_cycle_of_partitions(nodes, local):
    size = nodes * local
    for k in (d for d in range(2, size + 1) if size % d == 0):
        strategy = StaticStrategy(Topology(size, local), k, pool_size=3, seed=0)
        for division in strategy.schedule:
            assert sorted(r for g in division for r in g) == list(range(size))
        assert is_connected(size, (g for d in strategy.schedule for g in d))
        assert strategy.sets_per_rank() <= 4


@pytest.mark.parametrize("node_sizes", [(4, 2), (1, 2, 3), (3, 1), (2, 4, 2), (1, 1, 4)])
def test_static_schedules_on_nodes_of_different_sizes(node_sizes):
    topology = Topology.of_nodes(node_sizes)
    size = topology.size
    for k in (d for d in range(2, size + 1) if size % d == 0):
        strategy = StaticStrategy(topology, k, pool_size=3, seed=0)
        for division in strategy.schedule:
            assert sorted(r for g in division for r in g) == list(range(size))
        assert is_connected(size, (g for d in strategy.schedule for g in d))
        # The first division keeps groups inside nodes wherever a node holds k ranks.
        whole = sum(n // k for n in node_sizes)
        inside = [g for g in strategy.schedule[0] if len({topology.node_of(r) for r in g}) == 1]
        assert len(inside) >= whole


@pytest.mark.parametrize(
    ("options", "size", "message"),
    [
        ({"strategy": "static", "group_size": 3}, 4, "multiple of group_size"),
        ({"strategy": "adpsgd", "group_size": 4}, 4, "pairs"),
        ({"group_size": 5}, 4, "larger than the world size"),
        ({"pool_size": 1}, 4, "pool_size"),
        ({"strategy": "random", "pool_size": 1, "group_size": 2}, 8, "never mixes"),
    ],
)
def test_options_that_cannot_fit_the_cluster(options, size, message):
    with pytest.raises(ValueError, match=message):
        make_strategy(PragueConfig(**options), Topology(size, size))


def test_group_generator_rejects_requests_after_finish_and_bad_ranks():
    gg = GroupGenerator(make_strategy(PragueConfig(), Topology(4, 4)))
    gg.finish(2)
    with pytest.raises(ValueError, match="after it finished"):
        gg.next_group(2)
    with pytest.raises(ValueError, match="not in 0..3"):
        gg.next_group(7)
    for _ in range(10):
        assert 2 not in gg.next_group(random.choice([0, 1, 3]))


def test_finish_keeps_owed_groups_apart_from_world_averages():
    """With 2 ranks every step group is the world group: only the reply's split tells a
    finishing rank which of its groups its partner runs as a step and which as a sync."""
    gg = GroupGenerator(make_strategy(PragueConfig(strategy="random"), Topology(2, 2)))
    assert gg.next_group(0) == (0, 1)
    assert gg.sync(0, 1) == Owed([], 1)
    assert gg.finish(1) == Owed([(0, 1)], 1)
    assert gg.finish(0) == Owed([], 0)


def test_a_sync_pauses_ranks_until_every_rank_reached_it():
    gg = GroupGenerator(make_strategy(PragueConfig(strategy="static"), Topology(4, 2)))
    assert gg.next_group(0) == (0, 1)
    assert gg.sync(0, 1) == Owed([], 1)
    # Rank 1 still owes (0, 1): it runs it before the world group.
    assert gg.sync(1, 1) == Owed([(0, 1)], 1)
    # Ranks 0 and 1 are paused: groups formed now leave them out.
    assert gg.next_group(2) == (2, 3)
    for _ in range(5):
        assert set(gg.next_group(2)).isdisjoint({0, 1})
    assert gg.sync(2, 1).world_averages == 1
    with pytest.raises(ValueError, match="reached sync 1 twice"):
        gg.sync(2, 1)
    # Rank 3 finishes instead of reaching the sync: it runs the world group too, and with
    # that every rank has arrived, so groups may contain ranks 0, 1 and 2 again.
    assert gg.finish(3).world_averages == 1
    assert gg.paused == set()
    assert any(len(gg.next_group(0)) > 1 for _ in range(4))
    assert gg.sync(0, 2).world_averages == 0  # rank 3 has finished: no world average


@pytest.mark.parametrize(
    ("name", "size", "local", "expected"),
    [
        (
            "smart",
            8,
            4,
            [(5, 7), (7,), (7,), (0, 3), (1, 2), (7,), (2, 3), (1, 2), (7,), (4, 6), (2,), (1, 4)],
        ),
        (
            "random",
            6,
            6,
            [(1, 3), (0, 4), (3, 4), (3, 4), (3, 4), (3, 4), (1, 3), (0, 1), (3, 4), (3, 4), (2, 5)]
            + [(0, 4)],
        ),
    ],
)
def test_a_seed_gives_the_groups_it_always_gave(name, size, local, expected):
    """Known answers, recorded before the strategies kept per-division rank maps: a change in
    how strategies draw (not only a change between two runs of the same code) shows here."""
    gg = GroupGenerator(make_strategy(PragueConfig(strategy=name, seed=5), Topology(size, local)))
    order = random.Random(11)
    assert [gg.next_group(order.randrange(size)) for _ in range(12)] == expected


@pytest.mark.parametrize(
    ("strategy", "size", "per_node", "expected"),
    [
        ("smart", 8, 4, 2),
        ("smart", 12, 4, 2),
        ("smart", 16, 4, 4),
        ("random", 32, 4, 4),
        ("static", 16, 4, 4),
        ("static", 18, 6, 2),  # groups of 4 cannot tile 18 ranks
        ("smart", 18, 6, 4),
        ("adpsgd", 16, 4, 2),
    ],
)
def test_the_default_group_size_is_pairs_below_16_ranks_and_fours_from_16(
    strategy, size, per_node, expected
):
    groups = make_strategy(PragueConfig(strategy=strategy), Topology(size, per_node)).groups()
    assert max(len(g) for g in groups if len(g) < size) == expected
