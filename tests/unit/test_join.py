"""Horovod's ``join`` under Prague: ranks with uneven data.

A rank that joins leaves the groups (what it owes first), the others average among
themselves until they join too, ``join`` returns Horovod's result, and every rank then holds
the same model; training may go on after it (``join`` once per epoch). In-process ranks
(``in_process``): a real Group Generator and ``Binding``; a world average started while a rank
waits in ``join`` would time out here (under Horovod it would average zeros in silence).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from in_process import (
    Collectives,
    HorovodJoin,
    InProcessBinding,
    InProcessRuntime,
    random_generator,
    run_ranks,
)
from simulate import assert_shared_groups_in_one_order, simulate

from horovod_prague.common.config import PragueConfig
from horovod_prague.common.group_generator import GroupGenerator, WorldGroup
from horovod_prague.common.strategies import make_strategy
from horovod_prague.common.topology import Topology


def test_a_rank_rejoins_once_finished_and_its_syncs_go_on_from_the_last():
    gg = random_generator(2)
    gg.next_group(0)
    assert gg.sync(0, 1) is not None
    gg.finish(1)
    assert gg.sync(0, 2).world_averages == 0  # a rank had finished: no world average
    gg.finish(0)
    assert gg.rejoin(0) == 2 and gg.rejoin(1) == 2
    assert gg.active == {0, 1}
    assert gg.sync(0, 3) is not None and gg.sync(1, 3) is not None
    assert gg.next_group(0) == (0, 1)


def _smart_generator(size: int) -> GroupGenerator:
    return GroupGenerator(make_strategy(PragueConfig(strategy="smart"), Topology(size, size)))


def _alone_steps(gg: GroupGenerator, rank: int, steps: int) -> None:
    for _ in range(steps):
        assert gg.next_group(rank) == (rank,)


def test_after_join_the_rank_with_the_most_steps_meets_the_others_again():
    """Two epochs of uneven data: the threshold rule counts steps since the join's world
    average. Counted from the start, the rank that took 18 steps in the first epoch against
    the others' 6 stayed "ahead" for the rest of the run, and its own requests made no group
    (on 4 real ranks, 25 of its 36 steps alone)."""
    gg = _smart_generator(2)
    gg.finish(0)  # rank 0 joins at once; rank 1 takes 18 steps alone, then joins
    _alone_steps(gg, 1, 18)
    gg.finish(1)
    gg.rejoin(0)
    gg.rejoin(1)
    assert gg.steps_since_consensus() == (0, 0)
    assert gg.next_group(1) == (0, 1)


@pytest.mark.parametrize("joined", [0, 1, 2])
def test_ranks_still_training_meet_in_groups_after_one_has_joined(joined):
    gg = _smart_generator(4)
    gg.finish(joined)
    for rank in sorted(set(range(4)) - {joined}):
        group = gg.next_group(rank)
        assert len(group) == 2 and joined not in group, group


def test_after_a_world_average_lag_counts_from_it():
    gg = _smart_generator(2)
    gg.next_group(0)
    for _ in range(6):
        gg.next_group(1)  # the first is (0, 1), buffered for rank 0 too; then rank 0 lags
    assert gg.next_group(1) == (1,)
    assert gg.sync(1, 1).world_averages == 1
    assert gg.sync(0, 1).world_averages == 1
    assert gg.steps_since_consensus() == (0, 0)
    assert gg.next_group(1) == (0, 1)


def test_after_the_periodic_world_group_lag_counts_from_it():
    """Each rank counts from the step at which it ran the world group: before, the rank that
    had run ahead stayed "ahead" after the world average, and its next step was alone."""
    gg = GroupGenerator(make_strategy(PragueConfig(strategy="smart"), Topology(2, 2)), 8)
    gg.next_group(0)
    taken = [gg.next_group(1) for _ in range(8)]
    assert (1,) in taken and isinstance(taken[-1], WorldGroup)
    while gg.buffers[0]:
        gg.next_group(0)
    assert gg.counts == [3, 8]
    assert gg.steps_since_consensus() == (0, 0)
    assert gg.next_group(1) == (0, 1)


def test_a_rank_that_has_not_finished_cannot_rejoin():
    gg = random_generator(2)
    with pytest.raises(ValueError, match="rank 1 asked to rejoin but it has not finished"):
        gg.rejoin(1)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["smart", "random", "static"]),
    st.lists(st.integers(1, 14), min_size=4, max_size=4),
    st.integers(2, 5),
    st.randoms(),
)
def test_syncs_after_a_rank_has_joined_never_deadlock(strategy, steps, every, rnd):
    """Uneven steps, a sync with the script's global collective after it every few steps,
    ranks that run out of steps join (Horovod's join: they take part in the collectives of
    the others). A sync reached once a rank has joined has no world average, but the rank
    still runs its owed groups and is paused until every rank has reached it or finished:
    before, it entered the collective owing a group to a rank still stepping, which then
    waited for it (both timed out: 4 ranks, two optimizers, a metric all-reduce every 10
    steps)."""
    gg = GroupGenerator(make_strategy(PragueConfig(strategy=strategy), Topology(4, 2)))
    history = simulate(
        gg,
        steps,
        pick=rnd.choice,
        syncs_at=frozenset(range(every, 15, every)),
        collective_after_sync=True,
        joined=True,
    )
    assert_shared_groups_in_one_order(history, 4)


def _train(b: InProcessBinding, w: np.ndarray, steps: int, metric_every: int = 0) -> None:
    for step in range(steps):
        w += 1.0
        b.exchange(b.models.step_tensors([w]))
        if metric_every and step % metric_every == 0:
            b.consensus()  # what the guard runs before the script's hvd.allreduce(metric)


@pytest.mark.parametrize(
    ("steps", "metric_every"), [((3, 7, 5, 0), 0), ((10, 2, 6, 4), 3), ((1, 1, 1, 9), 2)]
)
def test_uneven_steps_then_join_end_with_one_model_and_horovods_result(steps, metric_every):
    size = len(steps)
    horovod_join = HorovodJoin(size)
    models: dict[int, np.ndarray] = {}
    returned: dict[int, int] = {}

    def script(rank: int, b: InProcessBinding) -> None:
        w = np.array([float(rank)])
        b.models.track(lambda: [w])
        _train(b, w, steps[rank], metric_every)
        returned[rank] = b.join(lambda: horovod_join(rank))
        models[rank] = w.copy()

    gg = run_ranks(size, 0, script)
    assert len({m.tobytes() for m in models.values()}) == 1, models
    assert set(returned.values()) == {horovod_join.joined[-1]}
    assert gg.active == set(range(size))  # every rank may take steps again


def test_join_once_per_epoch_then_finish():
    """Two epochs of uneven length, each ended by ``join``, then the exit's ``finish``:
    the second epoch's steps meet in groups again, and syncs line up after the rejoin."""
    size, epochs = 3, ((4, 1, 2), (2, 5, 3))
    joins = [HorovodJoin(size) for _ in epochs]
    models: dict[int, np.ndarray] = {}
    after_join: dict[int, list[np.ndarray]] = {r: [] for r in range(size)}

    def script(rank: int, b: InProcessBinding) -> None:
        w = np.array([10.0 * rank])
        b.models.track(lambda: [w])
        for epoch, steps in enumerate(epochs):
            _train(b, w, steps[rank], metric_every=2)
            b.join(lambda j=joins[epoch]: j(rank))
            after_join[rank].append(w.copy())
            b.consensus()  # hvd.allreduce(val_loss) after join: nothing changed since
        b.finish([w])
        models[rank] = w

    gg = run_ranks(size, 0, script)
    for epoch in range(len(epochs)):
        assert len({after_join[r][epoch].tobytes() for r in range(size)}) == 1
    assert len({m.tobytes() for m in models.values()}) == 1
    assert sum(gg.counts) >= sum(map(sum, epochs))
    assert gg.generations > 0


def test_join_before_prague_is_initialized_is_horovods():
    b = InProcessBinding(InProcessRuntime(random_generator(2), 0, 0), Collectives())
    b.job.runtime = None
    assert b.join(lambda: 7) == 7


def test_join_without_a_tracked_model_returns_once_every_rank_has_rejoined():
    """A script with no Prague model (metrics only) that ends with ``join``: no rank may
    return before every rank has rejoined, or rank 0 exits, closing the Group Generator on a
    rank that is still about to rejoin. Ranks 1 and 2 come out of Horovod's join late."""
    size = 3
    horovod_join = HorovodJoin(size)
    seen_by_rank_0: list[set[int]] = []

    def late(rank: int) -> int:
        last = horovod_join(rank)
        if rank:
            time.sleep(0.3)  # a slow rank: its rejoin comes after rank 0's
        return last

    def script(rank: int, b: InProcessBinding) -> None:
        b.join(lambda: late(rank))
        if rank == 0:
            seen_by_rank_0.append(set(b.job.runtime.gg.active))

    run_ranks(size, 0, script)
    assert seen_by_rank_0 == [set(range(size))]
