"""An elastic state's commit under ``elastic_commit=local`` (``horovod_prague.common.elastic``):
the ranks agree through the Group Generator whether the hosts changed, at the same commit,
without waiting for each other; Horovod's own check where Prague does not run so."""

from __future__ import annotations

import pytest
from horovod.common.elastic import ObjectState
from horovod.common.exceptions import HostsUpdatedInterrupt
from horovod.runner.elastic.worker import HostUpdateResult

from horovod_prague.common.elastic import commit_without_waiting
from horovod_prague.common.group_generator import GroupGenerator
from horovod_prague.common.strategies import StaticStrategy
from horovod_prague.common.topology import Topology


class Ranks:
    """The Group Generator and, per rank, what ``Binding`` gives ``check_host_updates``."""

    def __init__(self, size: int, local: bool = True) -> None:
        self.gg = GroupGenerator(StaticStrategy(Topology(size, size), 2, 1, seed=0))
        self.local = local
        self.commits = [0] * size
        self.settled: list[int] = []

    def binding(self, rank: int) -> RankBinding:
        return RankBinding(self, rank)


class RankBinding:
    def __init__(self, ranks: Ranks, rank: int) -> None:
        self.ranks, self.rank = ranks, rank

    def commits_alone(self) -> bool:
        return self.ranks.local

    def host_changes(self, notice):
        self.ranks.commits[self.rank] += 1
        return self.ranks.gg.host_changes(self.rank, self.ranks.commits[self.rank], *notice)

    def settle(self) -> None:
        self.ranks.settled.append(self.rank)


def states(ranks: Ranks) -> list[ObjectState]:
    """One elastic state per rank, each class checking through its rank's binding, and a
    broadcast that returns what it is given (Horovod's check on one rank)."""
    made = []
    for rank in range(len(ranks.commits)):
        cls = type(f"Rank{rank}State", (ObjectState,), {})
        commit_without_waiting(cls, ranks.binding(rank))
        made.append(cls(bcast_object=lambda obj: obj, get_rank=lambda r=rank: r, batch=0))
    return made


def test_rank_0s_notice_makes_every_rank_reset_at_the_next_commit_answered():
    """Horovod's driver tells rank 0 alone. Rank 1, ahead, has already passed commit 1 when
    rank 0 reports the notice there: every rank resets at commit 2, the first answered
    after the report."""
    ranks = Ranks(2)
    zero, one = states(ranks)
    one.commit()
    zero.on_hosts_updated(5.0, HostUpdateResult.removed)
    zero.commit()  # commit 1 was answered before the report: no change, on every rank
    assert ranks.settled == []
    with pytest.raises(HostsUpdatedInterrupt) as removed:
        one.commit()
    assert removed.value.skip_sync  # hosts removed only: Horovod skips the state's sync
    with pytest.raises(HostsUpdatedInterrupt):
        zero.commit()
    assert ranks.settled == [1, 0]
    assert zero._last_updated_timestamp == one._last_updated_timestamp == 5.0


def test_notices_reported_before_a_commit_is_answered_are_heard_together():
    ranks = Ranks(2)
    zero, one = states(ranks)
    zero.on_hosts_updated(5.0, HostUpdateResult.added)
    zero.on_hosts_updated(6.0, HostUpdateResult.removed)
    with pytest.raises(HostsUpdatedInterrupt) as mixed:
        zero.commit()
    assert not mixed.value.skip_sync  # hosts added too: the new ranks need the state
    with pytest.raises(HostsUpdatedInterrupt):
        one.commit()
    assert zero._last_updated_timestamp == one._last_updated_timestamp == 6.0
    zero.commit(), one.commit()  # heard once: the next commit changes nothing


def test_a_notice_no_newer_than_the_last_change_changes_nothing():
    ranks = Ranks(2)
    for state in states(ranks):
        state._last_updated_timestamp = 5.0
        state.on_hosts_updated(5.0, HostUpdateResult.removed)
        state.commit()
        assert state._host_messages.empty()
    assert ranks.settled == []


def test_where_prague_commits_as_horovod_the_check_is_horovods():
    ranks = Ranks(2, local=False)
    state, _ = states(ranks)
    state.on_hosts_updated(5.0, HostUpdateResult.added)
    with pytest.raises(HostsUpdatedInterrupt):
        state.commit()
    assert ranks.commits == [0, 0] and ranks.settled == []
