"""The periodic global average (``sync_every``) as a group of the Group Generator.

The GG appends the world group to every buffer, in its one global order, when a rank's
request count reaches a new multiple of ``sync_every``; in-process ranks (threads, a real GG,
averages matched by collective name) show that ranks with different step counts meet it
without a hang, and that a world average pairs the same tensors on every rank.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from in_process import Collectives, InProcessBinding, InProcessRuntime, run_ranks
from simulate import assert_shared_groups_in_one_order, simulate

from horovod_prague.common.arguments import check_sync_every
from horovod_prague.common.config import PragueConfig
from horovod_prague.common.group_generator import GroupGenerator, Owed, WorldGroup
from horovod_prague.common.strategies import make_strategy
from horovod_prague.common.topology import Topology

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def generator(size: int, sync_every: int, strategy: str = "static") -> GroupGenerator:
    topology = Topology(size, 2 if size % 2 == 0 else 1)
    return GroupGenerator(make_strategy(PragueConfig(strategy=strategy), topology), sync_every)


def test_the_world_group_goes_into_every_buffer_after_the_groups_made_before_it():
    gg = generator(4, sync_every=2)
    first = gg.next_group(0)
    before = {r: list(gg.buffers[r]) for r in range(1, 4)}
    second = gg.next_group(0)
    assert not isinstance(first, WorldGroup)
    world = gg.buffers[3][-1]
    assert isinstance(world, WorldGroup) and world == (0, 1, 2, 3)
    for rank in range(1, 4):
        assert list(gg.buffers[rank]) == [*before[rank], world]
    assert second is world or list(gg.buffers[0])[-1] is world
    # Rank 3 took no step: it meets the world group after the groups made before it.
    seen = [gg.next_group(3) for _ in range(len(gg.buffers[3]))]
    assert seen[-1] is world and not any(isinstance(g, WorldGroup) for g in seen[:-1])


def test_one_world_group_per_multiple_whichever_rank_reaches_it():
    gg = generator(2, sync_every=3)
    worlds = []
    for rank in [0, 0, 0, 1, 1, 1, 0, 0, 0]:
        group = gg.next_group(rank)
        worlds.append(isinstance(group, WorldGroup))
    # Rank 0's third request makes it (and meets it); rank 1 meets it after the two groups
    # made before it; rank 0's sixth makes the next.
    assert worlds == [False, False, True, False, False, True, False, False, True]
    assert isinstance(gg.buffers[1][-1], WorldGroup)


def test_none_without_sync_every():
    gg = generator(2, sync_every=0)
    assert not any(isinstance(gg.next_group(r), WorldGroup) for r in [0, 1] * 10)


def test_postponed_while_a_rank_is_paused_at_a_sync_then_made():
    gg = generator(3, sync_every=2, strategy="random")
    assert gg.sync(2, 1) == Owed([], 1)
    gg.next_group(0)
    gg.next_group(0)  # count 2: rank 2 is paused, so no world group yet
    assert not any(isinstance(g, WorldGroup) for b in gg.buffers for g in b)
    gg.sync(0, 1)
    gg.sync(1, 1)  # every rank reached the sync: none paused
    gg.next_group(0)  # the postponed one is made at the next request
    assert all(isinstance(b[-1], WorldGroup) for b in gg.buffers[1:])


def test_skipped_once_a_rank_has_finished():
    gg = generator(3, sync_every=1, strategy="random")
    gg.finish(2)
    for _ in range(4):
        assert not isinstance(gg.next_group(0), WorldGroup)
        assert not isinstance(gg.next_group(1), WorldGroup)


def test_a_rank_at_a_sync_takes_the_world_group_as_owed():
    gg = generator(2, sync_every=2, strategy="random")
    gg.next_group(1)
    gg.next_group(1)
    owed = gg.sync(0, 1)
    assert owed is not None and any(isinstance(g, WorldGroup) for g in owed.groups)


@settings(FAST)
@given(
    st.sampled_from(["static", "random", "smart", "allreduce"]),
    st.integers(2, 6),
    st.integers(1, 4),
    st.lists(st.integers(0, 12), min_size=6, max_size=6),
    st.booleans(),
    st.randoms(),
)
def test_the_world_group_with_syncs_never_deadlocks(strategy, size, every, steps, even, rnd):
    """On top of the periodic world group: uneven step counts, or even ones with syncs and
    the script's global collective after each. Every run ends, shared groups (the world
    group among them) in one order on every rank."""
    gg = generator(size, every, strategy if size % 2 == 0 else "random")
    history = simulate(
        gg,
        [9] * size if even else steps[:size],
        pick=rnd.choice,
        syncs_at=frozenset({1, 3, 4, 8}) if even else frozenset(),
        collective_after_sync=even,
    )
    assert_shared_groups_in_one_order(history, size)


@pytest.mark.parametrize(("steps", "sync_every"), [((1, 3), 2), ((0, 5), 2), ((2, 7, 4), 3)])
def test_uneven_steps_then_a_global_collective_and_finish_end_with_one_model(steps, sync_every):
    """Uneven step counts: a step per ``exchange``, then the guard's consensus (as in front of
    ``hvd.allreduce(loss)``) and ``finish``."""
    models: dict[int, np.ndarray] = {}

    def script(rank: int, b: InProcessBinding) -> None:
        w = np.array([float(rank)])
        b.models.track(lambda: [w])
        for _ in range(steps[rank]):
            w += 1.0
            b.exchange(b.models.step_tensors([w]))
        b.consensus() if b.job.exchanges_since_consensus else b.average_model([w])
        b.finish([w])
        models[rank] = w

    run_ranks(len(steps), sync_every, script)
    assert len({m.tobytes() for m in models.values()}) == 1


def test_a_missed_sync_in_finish_pairs_the_same_tensors_as_the_partners_consensus():
    """Reordered models: rank 1 finishes with ``finish([p1, p2])`` while rank 0 ran a
    consensus over its optimizer's ``[p2, p1]``: the world average pairs p1 with p1."""
    models: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def script(rank: int, b: InProcessBinding) -> None:
        p1, p2 = np.array([0.0]), np.array([100.0])
        b.models.track(lambda: [p2, p1])
        if rank == 0:
            b.average_model(b.tracked())
        b.finish([p1, p2])
        models[rank] = (p1, p2)

    run_ranks(2, 0, script)
    assert all((p1[0], p2[0]) == (0.0, 100.0) for p1, p2 in models.values())


def test_the_world_tensors_put_tracked_models_first_in_registration_order():
    b = InProcessBinding(InProcessRuntime(generator(2, 0), 0, 0), Collectives())
    a, c, x = np.zeros(1), np.zeros(1), np.zeros(1)
    b.models.track(lambda: [c, a])
    assert [id(t) for t in b.models.world_tensors([x, a, c])] == [id(c), id(a), id(x)]


def test_an_optimizer_sync_every_other_than_the_jobs_is_refused():
    b = InProcessBinding(InProcessRuntime(generator(2, 4), 0, 4), Collectives())
    check_sync_every(None, b.config)
    check_sync_every(4, b.config)
    with pytest.raises(ValueError, match=r"sync_every=2 differs from the job's sync_every=4"):
        check_sync_every(2, b.config)
    with pytest.raises(ValueError, match=r"sync_every: must be >= 0 \(0 = never\), got -1"):
        check_sync_every(-1, b.config)


def test_a_groups_averages_take_the_cycle_of_names_and_each_meets_its_own_partner():
    """A name comes back every ``NAME_CYCLE`` averages, so Horovod's
    response cache can serve it; neighbouring averages still differ in name, and each
    average of a reused name pairs the members' values of that average, not an earlier."""
    from horovod_prague.common.process_sets import NAME_CYCLE

    models: dict[int, np.ndarray] = {}

    def script(rank: int, b: InProcessBinding) -> None:
        w = np.zeros(1)
        for _ in range(2 * NAME_CYCLE + 1):
            w += rank + 1  # each average: the mean moves by 1.5
            b.average_model([w])
        models[rank] = w

    collectives = Collectives()
    run_ranks(2, 0, script, collectives)
    assert all(m[0] == 1.5 * (2 * NAME_CYCLE + 1) for m in models.values()), models
    names = [name for rank, name in collectives.names if rank == 0]
    assert len(names) == 2 * NAME_CYCLE + 1
    assert all(a != b for a, b in zip(names, names[1:], strict=False))
    assert names[:NAME_CYCLE] == names[NAME_CYCLE : 2 * NAME_CYCLE]
