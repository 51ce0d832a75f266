"""The script's own process sets beside Prague's (``ProcessSetPool.add_for_script`` and
``remove_for_script``), with a stand-in for Horovod's process-set table that answers as
Horovod 0.28.1's does: one set per list of ranks, the global set among them."""

from __future__ import annotations

import pytest

from horovod_prague.common.process_sets import DYNAMIC_SETS_VAR, ProcessSetPool

PAIRS = ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3))


class ProcessSet:
    """Horovod's ``ProcessSet``, as far as the pool uses it."""

    process_set_id: int | None = None

    def __init__(self, ranks) -> None:
        self.ranks = sorted(ranks)

    def _invalidate(self) -> None:
        self.process_set_id = None

    def __str__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


class TableHorovod:
    """Horovod's dynamic process sets over a table of ids -> ranks (id 0: the world)."""

    ProcessSet = ProcessSet

    def __init__(self, size: int = 4) -> None:
        self.table: dict[int, list[int]] = {0: list(range(size))}
        self.global_process_set = ProcessSet([])
        self.global_process_set.process_set_id = 0
        self.calls: list[str] = []

    def _register(self, ranks: list[int]) -> int:
        new_id = min(set(range(1, len(self.table) + 1)) - set(self.table))
        self.table[new_id] = ranks
        return new_id

    def add_process_set(self, process_set):
        self.calls.append("add_process_set")
        if not isinstance(process_set, ProcessSet):
            process_set = ProcessSet(process_set)
        if process_set.ranks in self.table.values():
            raise ValueError(f"Attempted to add a duplicate process set: {process_set}")
        process_set.process_set_id = self._register(process_set.ranks)
        return process_set

    def add_process_sets(self, process_sets):
        self.calls.append("add_process_sets")
        sets = [s if isinstance(s, ProcessSet) else ProcessSet(s) for s in process_sets]
        ranks = [s.ranks for s in sets]
        if any(r in self.table.values() or ranks.count(r) > 1 for r in ranks):
            raise ValueError(f"Attempted to add a duplicate process set: {sets}")
        for process_set in sets:
            process_set.process_set_id = self._register(process_set.ranks)
        return sets

    def remove_process_set(self, process_set) -> bool:
        self.calls.append("remove_process_set")
        ps_id = process_set.process_set_id
        if ps_id is None or ps_id == 0:
            return False
        process_set._invalidate()
        return self.table.pop(ps_id, None) is not None


@pytest.fixture
def dynamic(monkeypatch):
    monkeypatch.setenv(DYNAMIC_SETS_VAR, "1")


def _pool(hvd: TableHorovod, groups=PAIRS, rank: int = 0, **kwargs) -> ProcessSetPool:
    return ProcessSetPool(hvd, groups, size=4, rank=rank, **kwargs)


def test_a_set_with_the_ranks_of_pragues_is_shared_and_outlives_the_scripts_removal(dynamic):
    hvd = TableHorovod()
    pool = _pool(hvd)
    before = dict(hvd.table)
    mine = hvd.ProcessSet([1, 0])
    assert pool.add_for_script([mine], batch=False) == [mine]
    assert mine.process_set_id == pool.sets[(0, 1)].process_set_id
    assert hvd.table == before  # nothing added to Horovod
    with pytest.raises(ValueError, match="duplicate process set: ProcessSet.*ranks=\\[0, 1\\]"):
        pool.add_for_script([[0, 1]], batch=False)  # the script holds it already, as in Horovod
    assert pool.remove_for_script(mine) is True
    assert mine.process_set_id is None  # invalidated, as Horovod invalidates a removed set
    assert hvd.table == before and pool.sets[(0, 1)].process_set_id in hvd.table
    assert "remove_process_set" not in hvd.calls
    assert pool.remove_for_script(mine) is False  # already removed
    again = pool.add_for_script([[0, 1]], batch=False)[0]
    assert again.process_set_id == pool.sets[(0, 1)].process_set_id


def test_a_set_prague_does_not_have_is_horovods_to_add_and_remove(dynamic):
    hvd = TableHorovod()
    pool = _pool(hvd)
    trio = pool.add_for_script([[0, 1, 2]], batch=False)[0]
    assert hvd.table[trio.process_set_id] == [0, 1, 2]
    assert pool.remove_for_script(trio) is True
    assert [0, 1, 2] not in hvd.table.values()
    assert hvd.calls[-1] == "remove_process_set"


def test_the_world_and_a_set_given_twice_are_duplicates_and_a_batch_adds_none(dynamic):
    hvd = TableHorovod()
    pool = _pool(hvd)
    before = dict(hvd.table)
    with pytest.raises(ValueError, match="duplicate process set"):
        pool.add_for_script([[0, 1, 2, 3]], batch=False)  # Horovod's global set
    with pytest.raises(ValueError, match="duplicate process set"):
        pool.add_for_script([[0, 1], [0, 1, 2], [1, 0]], batch=True)
    with pytest.raises(ValueError, match="duplicate process set"):
        pool.add_for_script([[0, 1], [0, 1, 2], [0, 1, 2, 3]], batch=True)  # Horovod refuses
    assert hvd.table == before and pool.held == {}
    shared, trio = pool.add_for_script([[2, 3], hvd.ProcessSet([0, 1, 2])], batch=True)
    assert shared.process_set_id == pool.sets[(2, 3)].process_set_id
    assert hvd.table[trio.process_set_id] == [0, 1, 2]
    assert pool.held == {(2, 3): shared.process_set_id, (0, 1, 2): trio.process_set_id}


def test_the_global_set_and_an_unknown_one_are_horovods_answer(dynamic):
    hvd = TableHorovod()
    pool = _pool(hvd)
    assert pool.remove_for_script(hvd.global_process_set) is False
    assert pool.remove_for_script(hvd.ProcessSet([0, 1])) is False  # never added: no id
    assert len(hvd.table) == 1 + len(PAIRS)


def test_a_stale_set_with_the_id_of_one_of_pragues_is_not_removed(dynamic):
    """After an elastic reset, a set from the old world may carry an id Prague's new sets
    reuse: the script no longer holds it, and Prague's set stays."""
    hvd = TableHorovod()
    pool = _pool(hvd)
    stale = hvd.ProcessSet([0, 1])
    stale.process_set_id = pool.sets[(1, 3)].process_set_id
    assert pool.remove_for_script(stale) is False
    assert pool.sets[(1, 3)].process_set_id in hvd.table


def test_sets_given_to_init_are_the_scripts_and_prague_keeps_objects_of_its_own(dynamic):
    """Static sets: Horovod's ``init`` registered the script's objects, Prague's pairs among
    them; the script's removal of one leaves Prague's own object valid."""
    hvd = TableHorovod()
    mine = [hvd.ProcessSet([0, 1]), hvd.ProcessSet([0, 1, 2])]
    registered = [mine[0], *(hvd.ProcessSet(list(g)) for g in PAIRS[1:])]
    for process_set in [*registered, mine[1]]:
        process_set.process_set_id = hvd._register(process_set.ranks)
    pool = _pool(hvd, sets=registered, script_sets=mine)
    assert pool.sets[(0, 1)] is not mine[0]
    assert pool.sets[(0, 1)].process_set_id == mine[0].process_set_id
    assert pool.held == {(0, 1): mine[0].process_set_id, (0, 1, 2): mine[1].process_set_id}
    assert pool.remove_for_script(mine[0]) is True
    assert mine[0].process_set_id is None and pool.sets[(0, 1)].process_set_id in hvd.table
    with pytest.raises(ValueError, match="duplicate"):
        pool.add_for_script([[0, 1, 2]], batch=False)


def test_sets_added_after_init_skip_the_ranks_of_the_scripts_sets_given_to_init(dynamic):
    """Where Prague adds its sets after ``init`` (no layout announced), a set the script gave
    to ``init`` with the ranks of one of Prague's serves both: Horovod holds each once."""
    hvd = TableHorovod()
    mine = hvd.ProcessSet([2, 3])
    mine.process_set_id = hvd._register(mine.ranks)
    pool = _pool(hvd, script_sets=[mine])
    assert pool.sets[(2, 3)].process_set_id == mine.process_set_id
    assert sorted(hvd.table.values()) == sorted([[0, 1, 2, 3], *map(list, PAIRS)])


def test_without_dynamic_process_sets_horovod_answers(monkeypatch):
    """Horovod refuses to add or remove sets after a static ``init``; so does the pool, with
    Horovod's own error, whatever the ranks."""
    monkeypatch.setenv(DYNAMIC_SETS_VAR, "0")
    hvd = TableHorovod()
    pool = _pool(hvd)

    def refuse(*args):
        raise ValueError("Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to allow adding process sets")

    hvd.add_process_set = refuse
    with pytest.raises(ValueError, match="HOROVOD_DYNAMIC_PROCESS_SETS=1"):
        pool.add_for_script([[0, 1]], batch=False)
    assert pool.held == {}
