"""Horovod elastic under the flag: a plain ``hvd.elastic.run`` script whose
worker dies mid-training; the survivors reset and go on.

Two "hosts" on this machine, as Horovod's own elastic tests make them: ``localhost`` and
``127.0.0.1``. The elastic driver drops the host of a failed worker, so the survivors are the
other host's ranks.
"""

from __future__ import annotations

import pytest
from launch import BIN, STOCK_OR_PRAGUE, discovery_script, run_ranks

pytestmark = pytest.mark.multirank

ELASTIC = [
    str(BIN / "horovodrun"),
    "--gloo",
    "-np",
    "4",
    "--min-np",
    "2",
    "-H",
    "localhost:2,127.0.0.1:2",
]
KILL = {
    "PRAGUE_KILL_HOST": "127.0.0.1",
    "PRAGUE_KILL_STEP": "12",
    # The longest a survivor's collective may wait for the dead worker before Horovod resets
    # (a killed worker's closed connections usually end it at once); long enough to ride out
    # the machine stopping for a while (docs/limitations.md), which at 20 s once made
    # every rank reset a second time.
    "HOROVOD_GLOO_TIMEOUT_SECONDS": "60",
}


def _survivors_of_a_lost_worker(script, tmp_path, flags):
    """The reports of the ranks that finished ``script`` under ``KILL``: the two on
    ``localhost``, reset once into a world of 2, with the same weights."""
    job = run_ranks(
        script,
        tmp_path,
        launcher=ELASTIC,
        launcher_flags=flags,
        env=KILL,
        timeout=300,
    ).check()
    reports = job.reports
    assert [rep["rank"] for rep in reports] == [0, 1], job.output[-3000:]
    for rep in reports:
        assert rep["host"] == "localhost" and rep["sizes"] == [4, 2], rep
        assert rep["resets"] == [2], rep
    assert len({rep["parameters"] for rep in reports}) == 1
    return reports


@pytest.mark.parametrize(
    ("script", "flags"),
    [
        pytest.param("elastic_torch.py", (), id="torch-stock", marks=pytest.mark.long),
        pytest.param("elastic_torch.py", ("--prague",), id="torch-prague"),
        pytest.param("tf_elastic.py", ("--prague",), id="tensorflow-prague"),
    ],
)
def test_a_lost_worker_leaves_survivors_that_finish_with_one_model(tmp_path, script, flags):
    """Stock Horovod and the flag alike: the worker on ``127.0.0.1`` dies at step 12; the two
    on ``localhost`` reset (under the flag: a new Group Generator and process sets for the
    world of 2) and take the 40 steps, restarting from the last commit. Under the flag they
    end with the same model, BatchNorm statistics included. A survivor's collective that
    meets Horovod's way out is Horovod's shut-down error, a reset: never "Process set
    provided does not exist" (``patches/0010``), never an average kept unrun whose name the
    next world refuses (``patches/0025``)."""
    reports = _survivors_of_a_lost_worker(script, tmp_path, flags)
    assert all(rep["step"] == 40 for rep in reports)
    if flags:
        assert len({rep["model"] for rep in reports}) == 1


@pytest.mark.parametrize("flags", STOCK_OR_PRAGUE)
def test_keras_fit_with_the_elastic_callbacks_survives_a_lost_worker(tmp_path, flags):
    """``model.fit`` in ``hvd.elastic.run`` with ``KerasState`` and Horovod's elastic
    callbacks (``workers/keras_elastic.py``): the step is Keras's ``tf.function``. The worker
    on ``127.0.0.1`` dies at batch 12; the two on ``localhost`` reset and finish the epochs
    with the same weights (BatchNorm's moving statistics are each rank's own, as with Horovod's
    Keras optimizer, unless ``DistributedOptimizer(opt, model=model)`` names the model).
    Before, under the flag, Horovod's ``run`` took the failed step for the end of training:
    its ``UnknownError`` named a grouped all-reduce, so ``train`` returned on every rank and
    the script went on in a broken world."""
    reports = _survivors_of_a_lost_worker("keras_elastic.py", tmp_path, flags)
    assert all(rep["epoch"] == 4 for rep in reports)


@pytest.mark.parametrize("flags", STOCK_OR_PRAGUE)
def test_rank_0_lost_leaves_survivors_that_finish_with_one_model(tmp_path, flags):
    """Rank 0 dies at step 12, and under the flag its Group Generator with it: the two ranks
    on the other host reset, one of them becomes rank 0 of the world of 2 and starts a new
    Group Generator, and both take the 40 steps and end with one model."""
    job = run_ranks(
        "elastic_torch.py",
        tmp_path,
        launcher=ELASTIC,
        launcher_flags=flags,
        env={**KILL, "PRAGUE_KILL_HOST": "", "PRAGUE_KILL_RANK": "0"},
        timeout=300,
    ).check()
    reports = job.reports
    assert [rep["rank"] for rep in reports] == [0, 1], job.output[-3000:]
    assert len({rep["host"] for rep in reports}) == 1
    for rep in reports:
        assert rep["sizes"] == [4, 2] and rep["ranks"][0] != 0, rep
        assert rep["step"] == 40 and rep["resets"] == [2], rep
    assert len({rep["parameters"] for rep in reports}) == 1
    if flags:
        assert len({rep["model"] for rep in reports}) == 1


def test_the_lone_survivor_goes_on_with_the_options_adapted_to_a_world_of_one(tmp_path):
    """``-np 2 --min-np 1`` under the flag with the default options (groups of 2): horovodrun
    warns before the start that a world of 1 runs other options; the worker on
    ``127.0.0.1`` dies at step 12, and the one on ``localhost`` resets into a world of 1,
    where rank 0 warns once how the options were adapted (``allreduce``: the world, itself
    alone) and takes the 40 steps averaging with nobody. Before, every reset failed in
    ``init`` with "group_size: 2 is larger than the world size 1" and the job ended, where
    stock Horovod goes on."""
    job = run_ranks(
        "elastic_torch.py",
        tmp_path,
        launcher=[
            str(BIN / "horovodrun"),
            "--gloo",
            "-np",
            "2",
            "--min-np",
            "1",
            "-H",
            "localhost:1,127.0.0.1:1",
        ],
        launcher_flags=("--prague",),
        env=KILL,
        timeout=240,
    ).check()
    [rep] = job.reports
    assert rep["host"] == "localhost" and rep["sizes"] == [2, 1] and rep["resets"] == [1], rep
    assert rep["step"] == 40, rep
    stats = rep["stats"]  # the world of 1's: every step alone
    assert stats["averaged"] == 0 and stats["alone"] == stats["steps"] > 0, stats
    assert job.output.count("horovodrun: warning: the Prague options do not fit every") == 1
    assert "  1 rank: strategy='allreduce' instead of 'smart'" in job.output
    adapted = "OptionsAdapted: Prague's options do not fit a world of 1 rank, which runs with"
    assert job.output.count(adapted) == 1, job.output[-3000:]


def test_survivors_average_in_groups_of_their_world_where_the_group_size_is_larger(tmp_path):
    """``-np 4 --min-np 2 --prague-group-size 4``: the worker on ``127.0.0.1`` dies at step 12
    and the two on ``localhost`` reset into a world of 2, which averages in groups of 2 (rank
    0 warns once); they take the 40 steps in groups and end with one model. Both worlds'
    groups are the whole world, on Horovod's global process set, which outlives the reset:
    an average that raced the first world's end must not hold its name into the second
    (``patches/0025``)."""
    job = run_ranks(
        "elastic_torch.py",
        tmp_path,
        launcher=ELASTIC,
        launcher_flags=("--prague", "--prague-group-size", "4"),
        env=KILL,
        timeout=240,
    ).check()
    reports = job.reports
    assert [rep["rank"] for rep in reports] == [0, 1], job.output[-3000:]
    for rep in reports:
        assert rep["sizes"] == [4, 2] and rep["resets"] == [2] and rep["step"] == 40, rep
        assert rep["stats"]["averaged"] + rep["stats"]["owed"] >= 1, rep
    assert len({rep["model"] for rep in reports}) == 1
    assert "  2 ranks: group_size=2 instead of 4" in job.output
    adapted = "Prague's options do not fit a world of 2 ranks, which runs with group_size=2 instead"
    assert job.output.count(adapted) == 1, job.output[-3000:]


def _discovered_job(
    tmp_path, flags, hosts_before: str, hosts_after: str, np: int, script="elastic_torch.py"
):
    """A job on the hosts a discovery script prints: ``hosts_before``, then, from rank 0's
    step 10, ``hosts_after``."""
    hosts, discover = discovery_script(tmp_path, hosts_before)
    return run_ranks(
        script,
        tmp_path,
        launcher=[
            str(BIN / "horovodrun"),
            "--gloo",
            "-np",
            str(np),
            "--min-np",
            "2",
            "--max-np",
            "4",
            "--host-discovery-script",
            str(discover),
            # Else the driver waits for a second host to compare interfaces, which a job
            # may not have at its start (Horovod says so only when its wait times out).
            "--network-interface",
            "lo",
        ],
        launcher_flags=flags,
        env={
            "PRAGUE_HOSTS_FILE": str(hosts),
            "PRAGUE_CHANGE_STEP": "10",
            "PRAGUE_NEW_HOSTS": hosts_after,
            "PRAGUE_NEW_SIZE": str(sum(int(h.split(":")[1]) for h in hosts_after.split(","))),
        },
        timeout=300,
    ).check()


@pytest.mark.parametrize("flags", STOCK_OR_PRAGUE)
def test_a_host_added_by_discovery_joins_from_the_committed_model(tmp_path, flags):
    """The job starts on ``localhost`` alone; at step 10 the discovery script starts listing
    ``127.0.0.1`` too. Horovod's driver starts workers there, the others reset at their next
    commit (under the flag: a Group Generator and process sets for the world of 4), and the
    new ranks begin from the committed step with rank 0's model, take their steps in the
    groups, and every rank ends with one model."""
    job = _discovered_job(tmp_path, flags, "localhost:2", "localhost:2,127.0.0.1:2", np=2)
    reports = job.reports
    assert [rep["rank"] for rep in reports] == [0, 1, 2, 3], job.output[-3000:]
    changed_at = reports[0]["changed_at"]
    assert len(changed_at) == 1 and changed_at[0] > 10 and changed_at[0] % 5 == 0, reports[0]
    for rep in reports:
        assert rep["size"] == 4 and rep["changed_at"] == changed_at, rep
        assert rep["step"] == max(40, changed_at[0] + 10), rep
        if rep["host"] == "localhost":
            assert rep["sizes"] == [2, 4] and rep["first_steps"] == [0, changed_at[0]], rep
            assert rep["resets"] == [4], rep
        else:  # started by the driver: never reset, begins at the committed step
            assert rep["sizes"] == [4] and rep["first_steps"] == changed_at, rep
            assert rep["resets"] == [] and rep["taken"] == rep["step"] - changed_at[0], rep
        if flags:  # how many groups form depends on timing; at least one does
            assert rep["stats"]["averaged"] + rep["stats"]["owed"] >= 1, rep
    assert len({rep["parameters"] for rep in reports}) == 1
    if flags:
        assert len({rep["model"] for rep in reports}) == 1


@pytest.mark.parametrize("flags", STOCK_OR_PRAGUE)
def test_a_host_removed_by_discovery_leaves_the_others_going_on(tmp_path, flags):
    """The job starts on ``localhost`` and ``127.0.0.1``; at step 10 the discovery script
    lists ``localhost`` alone. Its two ranks reset at their next commit, without restoring
    (nothing failed), and go on in a world of 2 with one model."""
    job = _discovered_job(tmp_path, flags, "localhost:2,127.0.0.1:2", "localhost:2", np=4)
    reports = job.reports
    assert [rep["rank"] for rep in reports] == [0, 1], job.output[-3000:]
    changed_at = reports[0]["changed_at"]
    assert len(changed_at) == 1 and changed_at[0] > 10 and changed_at[0] % 5 == 0, reports[0]
    for rep in reports:
        assert rep["host"] == "localhost" and rep["sizes"] == [4, 2], rep
        assert rep["changed_at"] == changed_at and rep["resets"] == [2], rep
        assert rep["step"] == max(40, changed_at[0] + 10), rep
    assert len({rep["parameters"] for rep in reports}) == 1
    if flags:
        assert len({rep["model"] for rep in reports}) == 1


@pytest.mark.parametrize(
    ("hosts_before", "hosts_after", "np"),
    [("localhost:2", "localhost:2,127.0.0.1:2", 2), ("localhost:2,127.0.0.1:2", "localhost:2", 4)],
    ids=["added", "removed"],
)
def test_keras_fit_goes_on_when_discovery_adds_or_removes_a_host(
    tmp_path, hosts_before, hosts_after, np
):
    """Under the flag, Keras ``fit`` with the elastic callbacks (``workers/keras_elastic.py``)
    on the hosts a discovery script lists, changed at batch 10: a host added gets workers that
    start from the committed epoch with rank 0's weights; a host removed leaves the others
    going on. Two epochs in the new world, then every rank holds the same weights."""
    job = _discovered_job(
        tmp_path, ("--prague",), hosts_before, hosts_after, np, script="keras_elastic.py"
    )
    reports = job.reports
    new_size = len(reports)
    assert new_size == (4 if np == 2 else 2), job.output[-3000:]
    changed_at = reports[0]["changed_at"]
    assert len(changed_at) == 1 and changed_at[0] >= 1, reports[0]
    for rep in reports:
        assert rep["size"] == new_size and rep["changed_at"] == changed_at, rep
        assert rep["epoch"] == changed_at[0] + 2, rep
        if rep["host"] == "localhost":
            assert rep["sizes"] == [np, new_size] and rep["resets"] == [new_size], rep
        else:  # started by the driver: never reset, begins at the committed epoch
            assert rep["sizes"] == [new_size] and rep["first_epochs"] == changed_at, rep
        # In groups in the new world: how many form depends on timing; at least one does.
        assert rep["stats"]["averaged"] + rep["stats"]["owed"] >= 1, rep
    assert len({rep["parameters"] for rep in reports}) == 1
