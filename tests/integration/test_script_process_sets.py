"""A script's own Horovod process sets under ``--prague``, as in stock Horovod, beside
Prague's sets for the same ranks."""

import pytest
from launch import run_ranks

pytestmark = pytest.mark.multirank

SETS = {"pair": [0, 1], "other": [2, 3], "trio": [0, 1, 2], "world": [0, 1, 2, 3]}
DUPLICATE = "ValueError: Attempted to add a duplicate process set: ProcessSet(process_set_id=None"


def _expected(members: list[int]) -> dict[str, object]:
    """What ``workers/script_process_sets.py``'s collectives return on one of ``members``."""
    values = [float(r + 1) for r in members]
    return {
        "named_sum": sum(values),
        "sum": sum(values),
        "gathered": values,
        "broadcast": values[-1],
        "mean": 2 * sum(values) / len(values),
    }


def _check_collectives(rank: int, used: dict[str, dict[str, object]]) -> None:
    for name, result in used.items():
        if rank in SETS[name]:
            assert result == _expected(SETS[name]), (name, result)
        else:
            assert result == {}, (name, result)


@pytest.mark.parametrize(
    "prague",
    [pytest.param(False, id="stock", marks=pytest.mark.long), pytest.param(True, id="prague")],
)
def test_dynamic_sets_the_script_adds_mid_training_work_as_in_stock_horovod(tmp_path, prague):
    """``hvd.init(process_sets="dynamic")``; after some steps, with random slowdowns, the
    script adds ``[0, 1]`` and ``[2, 3]`` (sets Prague registered for its pairs too),
    ``[0, 1, 2]`` (one Prague has not) and the world, runs named and unnamed collectives on
    the pairs, trains on, removes ``[0, 1]`` and ``[0, 1, 2]``, trains on, and adds ``[0, 1]``
    again. Every call answers as stock Horovod's does (the world and a set held twice are
    duplicates); Prague keeps its own ``[0, 1]`` through the script's removal and goes on
    averaging; every rank ends with one model."""
    flags = ("--prague",) if prague else ()
    job = run_ranks(
        "script_process_sets.py", tmp_path, np=4, args=("dynamic",), launcher_flags=flags
    ).check()
    assert len(job.reports) == 4, job.output[-3000:]
    for rep in job.reports:
        rank, results = rep["rank"], rep["results"]
        assert rep["same"], rep
        assert results["ids_valid"] == [True, True, True], results
        assert results["world_error"].startswith(DUPLICATE), results
        assert results["again_error"].startswith(DUPLICATE), results
        for phase in ("first", "second", "third"):
            _check_collectives(rank, results[phase])
        assert results["removed"] == [[True, None], [True, None]], results
        table = results["table_after_removal"]
        assert [0, 1, 2] not in table and [2, 3] in table, table
        if prague:
            assert [0, 1] in table, table  # Prague's own, kept for its averages
            assert rep["stats"]["averaged"] > 0, rep["stats"]
        else:
            assert [0, 1] not in table, table


@pytest.mark.parametrize(
    "prague",
    [pytest.param(False, id="stock", marks=pytest.mark.long), pytest.param(True, id="prague")],
)
def test_static_sets_given_to_init_work_as_in_stock_horovod(tmp_path, prague):
    """``hvd.init(process_sets=[ProcessSet([0, 1]), ProcessSet([2, 3]),
    ProcessSet([0, 1, 2])])``, two of them with the ranks of Prague's pairs: named and unnamed
    collectives on those mid-training, removal refused as stock Horovod refuses it without
    dynamic process sets, one model on every rank at the end."""
    flags = ("--prague",) if prague else ()
    job = run_ranks(
        "script_process_sets.py", tmp_path, np=4, args=("static",), launcher_flags=flags
    ).check()
    assert len(job.reports) == 4, job.output[-3000:]
    for rep in job.reports:
        rank, results = rep["rank"], rep["results"]
        assert rep["same"], rep
        assert results["ids_valid"] == [True, True, True], results
        for phase in ("first", "second"):
            _check_collectives(rank, results[phase])
        for removed, error in results["removed"]:
            assert removed is None and "HOROVOD_DYNAMIC_PROCESS_SETS=1" in error, results
        assert [0, 1] in results["table_after_removal"], results
        if prague:
            assert rep["stats"]["averaged"] > 0, rep["stats"]
