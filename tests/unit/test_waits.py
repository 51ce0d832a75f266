"""Who waits on whom: ranks report long waits to the Group Generator, and a rank that times
out follows the waits to the rank that holds it up."""

from __future__ import annotations

import threading
import time

import pytest

from horovod_prague.common.config import PragueConfig
from horovod_prague.common.group_generator import GroupGenerator, holding_up
from horovod_prague.common.overlap import (
    SLOW_WAIT_SHARE,
    BackgroundCall,
    GroupWaitTimeout,
    OverlappedAverager,
    PendingAverage,
    awaiting,
    wait_until,
)
from horovod_prague.common.strategies import make_strategy
from horovod_prague.common.topology import Topology


def generator(size=4):
    return GroupGenerator(make_strategy(PragueConfig(strategy="static"), Topology(size, 2)))


def test_a_reported_wait_lasts_until_the_rank_asks_again():
    gg = generator()
    gg.note_waiting(1, (2, 1))
    assert gg.waits() == [None, (1, 2), None, None]
    gg.next_group(1)
    assert gg.waits() == [None, None, None, None]


def test_a_rank_paused_at_a_sync_waits_on_the_world_unless_it_said_otherwise():
    gg = generator()
    gg.sync(2, 1)
    assert gg.waits()[2] == (0, 1, 2, 3)
    gg.note_waiting(2, (2, 3))  # an owed group, run before the world average
    assert gg.waits()[2] == (2, 3)


@pytest.mark.parametrize(
    ("rank", "group"),
    [(1, (1,)), (1, (0, 2)), (1, (1, 1)), (1, (1, 4)), (1, (1, -1)), (1, (1, "2")), (4, (0, 4))],
)
def test_a_wait_on_something_that_is_not_a_group_of_the_rank_is_refused(rank, group):
    gg = generator()
    with pytest.raises(ValueError, match="is not"):
        gg.note_waiting(rank, group)
    assert gg.waits() == [None] * 4


def test_holding_up_follows_waits_through_other_groups_to_ranks_waiting_on_nothing():
    # 2 stopped; 1 waits for it; 3 waits in a group with 1; 0 waits in one with 3.
    waits = [(0, 3), (1, 2), None, (1, 3)]
    assert holding_up((0, 3), 0, waits) == [2]
    assert holding_up((1, 3), 3, waits) == [2]
    assert holding_up((1, 2), 1, waits) == [2]
    # Every member waits on the same group: the missing one is the one that waits on nothing.
    assert holding_up((0, 1, 2, 3), 0, [(0, 1, 2, 3), (0, 1, 2, 3), None, (0, 1, 2, 3)]) == [2]
    # Two stopped ranks, each reached through a different member.
    assert holding_up((0, 1, 2), 0, [(0, 1, 2), (1, 4), (2, 3), None, None]) == [3, 4]
    # A cycle of waits (which the Group Generator's order rules out) ends, naming no one.
    assert holding_up((0, 1), 0, [(0, 1), (1, 2), (1, 2)]) == []


class Never(PendingAverage):
    def ready(self) -> bool:
        return False

    def apply(self, integers: bool = True) -> None:
        raise AssertionError("never ready")


def test_a_long_wait_is_reported_once_then_times_out_carrying_its_group():
    said: list[tuple[float, tuple[int, ...]]] = []
    began = time.monotonic()
    averager = OverlappedAverager(1, 0.4, lambda group: said.append((time.monotonic(), group)))
    averager.start(Never(), (0, 5))
    with pytest.raises(GroupWaitTimeout) as raised:
        averager.drain()
    assert raised.value.group == (0, 5)
    assert [group for _, group in said] == [(0, 5)]
    assert SLOW_WAIT_SHARE * 0.4 <= said[0][0] - began


def test_a_short_wait_is_not_reported():
    said: list[tuple[int, ...]] = []
    done = time.monotonic() + 0.02
    with awaiting((0, 1), said.append):
        wait_until(lambda: time.monotonic() > done, timeout=5.0, late=str)
    assert said == []


def test_a_blocking_call_that_waits_long_is_reported_and_carries_its_group():
    said: list[tuple[int, ...]] = []
    release = threading.Event()
    with pytest.raises(GroupWaitTimeout) as raised, awaiting((1, 2), said.append):
        BackgroundCall(lambda: release.wait(30)).result(0.4, lambda: "late")
    assert said == [(1, 2)] and raised.value.group == (1, 2)
    # Outside ``awaiting`` a long wait reports to no one.
    with pytest.raises(GroupWaitTimeout):
        BackgroundCall(lambda: release.wait(30)).result(0.4, lambda: "late")
    release.set()
    assert said == [(1, 2)]


def test_nested_awaiting_reports_the_inner_group_and_restores_the_outer():
    said: list[tuple[int, ...]] = []
    never = threading.Event()
    with pytest.raises(GroupWaitTimeout) as raised, awaiting((0, 1, 2, 3), said.append):
        with pytest.raises(GroupWaitTimeout) as inner, awaiting((0, 1), said.append):
            wait_until(never.is_set, timeout=0.2, late=str)
        assert inner.value.group == (0, 1)
        wait_until(never.is_set, timeout=0.2, late=str)
    assert said == [(0, 1), (0, 1, 2, 3)] and raised.value.group == (0, 1, 2, 3)
