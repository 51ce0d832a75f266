"""A script's collective on a process set of some ranks, between steps: the members settle
first (``GroupGenerator.settle``), so no rank waits in a group for a member in the
collective, whatever the interleaving."""

import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from in_process import InProcessBinding, run_ranks
from simulate import Deadlock, simulate
from test_strategies import FAST, jobs

from horovod_prague.common.config import PragueConfig
from horovod_prague.common.group_generator import GroupGenerator, WorldGroup
from horovod_prague.common.protocol import owed_message, owed_of
from horovod_prague.common.strategies import StaticStrategy, make_strategy
from horovod_prague.common.topology import Topology


def subsets(size: int, rnd: random.Random) -> dict[int, tuple[int, ...]]:
    """A process set of 2 to size - 1 ranks after each of a few steps."""
    return {
        step: tuple(sorted(rnd.sample(range(size), rnd.randint(2, max(2, size - 1)))))
        for step in rnd.sample(range(1, 12), 4)
    }


@FAST
@given(jobs(), st.randoms())
def test_a_collective_on_some_ranks_after_settling_never_deadlocks(job, rnd):
    config, topology = job
    if topology.size < 3:
        return
    gg = GroupGenerator(make_strategy(config, topology))
    at = subsets(topology.size, rnd)
    history = simulate(gg, [12] * topology.size, pick=rnd.choice, collectives_at=at)
    for rank, state in enumerate(history):
        assert all(rank in g for g in state.executed)
    assert not gg.held and not gg.gathering


def test_without_settling_such_a_collective_deadlocks():
    """The test above could fail: the same collectives with no settle first deadlock in some
    interleavings (a member waits in a group for one already in the collective)."""
    deadlocks = 0
    for seed in range(40):
        rnd = random.Random(seed)
        config = PragueConfig(strategy="smart", group_size=2, seed=seed, threshold=2)
        gg = GroupGenerator(make_strategy(config, Topology.of_nodes([2, 2, 2])))
        at = subsets(6, rnd)
        try:
            simulate(gg, [12] * 6, pick=rnd.choice, collectives_at=at, settle=False)
        except Deadlock:
            deadlocks += 1
    assert deadlocks > 0


def test_a_held_rank_takes_no_group_until_every_member_reached_the_settle():
    gg = GroupGenerator(StaticStrategy(Topology(4, 2), 2, 2, seed=0))
    assert gg.next_group(0) == (0, 1)
    owed = gg.settle(1, (0, 1))  # rank 1 owes (0, 1), then is held
    assert owed.groups == [(0, 1)] and owed.world_averages == 0
    assert gg.next_group(1) == (1,)  # an async collective's next step: alone
    for rank in (2, 3):  # their buffers run dry: new generations leave rank 1 out
        for _ in range(4):
            assert 1 not in gg.next_group(rank)
    assert gg.held_ranks() == [1]
    owed = gg.settle(0, (0, 1))  # every member reached it: both released
    assert owed.groups and all(1 not in g for g in owed.groups)  # made while 1 was held
    assert not gg.held
    assert gg.next_group(1) != (1,)  # released: in groups again


def test_the_periodic_world_group_waits_while_a_rank_is_held():
    """Appended while a member is held, the world group would wait for it in the collective."""
    gg = GroupGenerator(StaticStrategy(Topology(4, 2), 2, 2, seed=0), sync_every=2)
    gg.settle(0, (0, 1))
    for _ in range(3):
        for rank in (2, 3):
            assert gg.next_group(rank) != tuple(range(4))
    gg.settle(1, (0, 1))
    assert tuple(range(4)) in [gg.next_group(2) for _ in range(2)]


def test_a_world_group_owed_at_a_settle_stays_a_world_group():
    gg = GroupGenerator(StaticStrategy(Topology(4, 2), 2, 2, seed=0), sync_every=1)
    gg.next_group(0)  # appends the world group to every buffer
    owed = gg.settle(1, (1, 2))
    assert any(isinstance(g, WorldGroup) for g in owed.groups)
    assert owed_of(owed_message(owed)) == owed
    assert [type(g) for g in owed_of(owed_message(owed)).groups] == [type(g) for g in owed.groups]


def test_settles_are_counted_afresh_after_a_join():
    gg = GroupGenerator(StaticStrategy(Topology(4, 2), 2, 2, seed=0))
    gg.settle(0, (0, 1))
    for rank in range(4):  # rank 0 made one settle more before every rank joined
        gg.finish(rank)
    for rank in range(4):
        gg.rejoin(rank)
    gg.settle(0, (0, 1))
    gg.settle(1, (0, 1))
    assert not gg.held


def test_a_finished_member_releases_the_others():
    gg = GroupGenerator(StaticStrategy(Topology(4, 2), 2, 2, seed=0))
    gg.settle(0, (0, 1, 2))
    gg.settle(1, (0, 1, 2))
    assert set(gg.held) == {0, 1}
    gg.finish(2)
    assert not gg.held


def test_settles_are_counted_per_set_of_members():
    gg = GroupGenerator(StaticStrategy(Topology(4, 2), 2, 2, seed=0))
    gg.settle(0, (0, 1))
    gg.settle(0, (0, 1))  # the second collective on the set: a second settle
    gg.settle(1, (0, 1))
    assert gg.held == {0: {((0, 1), 2)}}
    gg.settle(1, (0, 1))
    assert not gg.held


@pytest.mark.parametrize("members", [(0,), (1, 2), (0, 0, 1), (0, 4), (0, True), [0, "1"]])
def test_a_settle_over_a_set_without_the_rank_or_malformed_is_refused(members):
    gg = GroupGenerator(StaticStrategy(Topology(4, 2), 2, 2, seed=0))
    with pytest.raises(ValueError, match="is not a process set of rank 0"):
        gg.settle(0, members)
    assert not gg.held and not gg.gathering


class _Set:
    """What a Horovod process set shows: its id and ranks."""

    def __init__(self, process_set_id: int | None, ranks: list[int]) -> None:
        self.process_set_id, self.ranks = process_set_id, ranks


def test_ranks_settle_before_their_sets_collectives_and_a_set_of_one_rank_needs_none():
    """Four in-process ranks step, then each settles before a collective on its pair's set
    and on a set of itself alone (Horovod allows one), as ``guard`` does."""
    pairs = {0: [0, 1], 1: [0, 1], 2: [2, 3], 3: [2, 3]}

    def script(rank: int, b: InProcessBinding) -> None:
        w = np.array([float(rank)])
        b.models.track(lambda: [w])
        for _ in range(3):
            b.exchange([w])
            b.before_collective(_Set(7 + rank // 2, pairs[rank]))
            b.before_collective(_Set(20 + rank, [rank]))
            b.before_collective(_Set(None, pairs[rank]))  # removed: Horovod's error follows
        b.finish([w])

    gg = run_ranks(4, 0, script)
    assert all(gg.settles[r] == {tuple(pairs[r]): 3} for r in range(4))
    assert not gg.held and not gg.gathering


def test_a_settle_over_members_in_any_order_is_the_settle_over_the_sorted_set():
    gg = GroupGenerator(StaticStrategy(Topology(4, 2), 2, 2, seed=0))
    gg.settle(0, (1, 0))
    gg.settle(1, [0, 1])
    assert not gg.held and not gg.gathering
