"""The unmodified example under ``horovodrun -np 4``, as stock Horovod and with ``--prague``."""

import dataclasses
import re
import subprocess

import pytest
from launch import BIN, REPO, run_ranks

from horovod_prague.common.config import PragueConfig
from horovod_prague.runner import flag

pytestmark = pytest.mark.multirank

EXAMPLE = str(REPO / "examples" / "pytorch_digits.py")
# Half the example's 20 epochs: 110 steps a rank (11 batches of 32), and past 0.97 at epoch
# 10 in every run so far.
EXAMPLE_ARGS = (EXAMPLE, "--epochs", "10")
STATED_ACCURACY = 0.93
# The flags of each case: a bare --prague is the default design (smart, overlapped averages);
# the allreduce strategy, blocking, must keep every rank identical. The drop-in's code does not
# depend on the strategy: "--prague smart" is the bare flag's, and the random strategy runs its
# steps to one model in test_prague.py's soak.
CASES = {
    "default": ("--prague",),
    "static": ("--prague", "static"),
    "adpsgd": ("--prague", "adpsgd"),
    "allreduce": ("--prague", "allreduce", "--prague-staleness", "0"),
}


def _final_accuracy(output):
    # Rank 0's line: "[0]<stdout>:" under Gloo, "[1,0]<stdout>:" under Open MPI.
    found = re.findall(r"\[(?:1,)?0\]<stdout>:final test accuracy ([0-9]+\.[0-9]+)", output)
    assert found, f"rank 0 printed no final accuracy:\n{output[-3000:]}"
    return float(found[-1])


def _steps(job):
    hashes = [rep["hashes"] for rep in job.reports]
    assert len(hashes) == 4, f"{len(hashes)} ranks reported:\n{job.output[-3000:]}"
    assert len({len(h) for h in hashes}) == 1, "ranks took different numbers of steps"
    assert len(hashes[0]) > 100
    return list(zip(*hashes, strict=True))


# Stock under MPI: test_setup's plain mpirun launch covers it in CI.
@pytest.mark.parametrize("controller", ["gloo", pytest.param("mpi", marks=pytest.mark.long)])
def test_without_the_flag_the_example_is_stock_horovod(tmp_path, controller):
    job = run_ranks("unmodified.py", tmp_path, controller=controller, args=EXAMPLE_ARGS).check()
    assert not any(rep["drop_in"] for rep in job.reports)
    for step, per_rank in enumerate(_steps(job)):
        assert len(set(per_rank)) == 1, f"ranks differ before step {step}"
    assert _final_accuracy(job.output) >= STATED_ACCURACY


# Every case under Gloo; under MPI the default and the blocking allreduce. At 4 ranks on one host
# the other strategies register pairs, as the default does, and the controller's own code (the
# options check, the layout, the Group Generator's address) does not depend on the strategy:
# CI leaves out adpsgd (pairs, as the default) and MPI's allreduce (the default's MPI case and
# Gloo's allreduce case cover them), which scripts/stress.sh runs.
LONG_RUNS = {("adpsgd", "gloo"), ("allreduce", "mpi")}
RUNS = [*((case, "gloo") for case in CASES), ("default", "mpi"), ("allreduce", "mpi")]
FLAG_RUNS = [
    pytest.param(
        case,
        controller,
        id=f"{case}-{controller}",
        marks=[pytest.mark.long] if (case, controller) in LONG_RUNS else [],
    )
    for case, controller in RUNS
]


@pytest.mark.parametrize(("case", "controller"), FLAG_RUNS)
def test_with_the_flag_the_example_averages_in_groups(tmp_path, controller, case):
    flags = CASES[case]
    job = run_ranks(
        "unmodified.py", tmp_path, controller=controller, args=EXAMPLE_ARGS, launcher_flags=flags
    ).check()
    assert all(rep["drop_in"] for rep in job.reports)
    steps = _steps(job)
    # The broadcasts before training leave every rank with rank 0's model.
    assert len(set(steps[0])) == 1
    differing = sum(len(set(per_rank)) > 1 for per_rank in steps)
    if case == "allreduce":
        assert differing == 0, "the allreduce strategy must keep every rank identical"
    else:
        assert differing > len(steps) // 2, f"ranks differed at only {differing} steps"
    assert _final_accuracy(job.output) >= STATED_ACCURACY


def test_sync_every_averages_globally_on_schedule(tmp_path):
    """``--prague-sync-every 5``: the Group Generator puts the world group into every rank's
    groups each time the first rank reaches another 5 steps; every rank meets it in the same
    order relative to its other groups, so all run the same world averages (seen from
    Horovod's side), with pair averages between them."""
    # The strategy from the variable, the other options from flags.
    flags = ("--prague-group-size", "2", "--prague-sync-every", "5")
    env = {"HOROVOD_PRAGUE_STRATEGY": "static"}
    steps = 30
    job = run_ranks(
        "meetings.py", tmp_path, args=(str(steps),), launcher_flags=flags, env=env
    ).check()
    worlds = {rep["rank"]: [len(g) == 4 for g in rep["met"]] for rep in job.reports}
    counts = {rank: sum(kinds) for rank, kinds in worlds.items()}
    # Up to steps / 5 periodic ones (a step that starts no average, two being in flight,
    # asks for no group), then the consensus before the script's allreduce and the final one.
    assert len(set(counts.values())) == 1, counts
    assert 2 + 2 <= counts[0] <= 2 + steps // 5, counts
    for rank, kinds in worlds.items():
        pairs_between = [i for i in range(1, len(kinds)) if not kinds[i - 1] and not kinds[i]]
        assert len(kinds) - counts[rank] >= steps // 2 and pairs_between, (rank, kinds)
    assert len({rep["final"] for rep in job.reports}) == 1


def _horovodrun(*args):
    return subprocess.run(
        [str(BIN / "horovodrun"), *args], capture_output=True, text=True, timeout=120
    )


def test_horovodrun_help_shows_every_prague_flag():
    result = _horovodrun("--help")
    assert result.returncode == 0, result.stderr
    for field in dataclasses.fields(PragueConfig):
        assert flag(field.name) in result.stdout


def test_horovodrun_rejects_an_impossible_group_before_starting_workers():
    result = _horovodrun(
        "-np", "4", "--prague", "smart", "--prague-group-size", "8", "python", "-c", "pass"
    )
    assert result.returncode == 2
    assert "--prague-group-size: a group of 8 ranks cannot form in a job of 4" in result.stderr


@pytest.mark.parametrize("script", ["init_twice.py", "tf_init_twice.py"], ids=["torch", "tf"])
def test_a_script_may_call_init_again_as_with_stock_horovod(tmp_path, script):
    """``hvd.init()`` twice (a no-op), once with another option (a ValueError naming it),
    and again after ``hvd.shutdown()`` (a fresh start), under the flag, PyTorch and
    TensorFlow; before, the second call raised "call horovod_prague's init() instead of
    Horovod's" on every rank."""
    job = run_ranks(
        script,
        tmp_path,
        np=2,
        launcher_flags=("--prague", "--prague-timeout", "20"),
        timeout=180,
    ).check()
    assert len(job.reports) == 2, job.output[-3000:]
    for rep in job.reports:
        assert rep["drop_in"], rep
        assert rep["refused"].startswith(
            "hvd.init() was called again with different options: sync_every=5 (was 0)."
        ), rep
    assert len({rep["after_first"] for rep in job.reports}) == 1
    assert len({rep["after_second"] for rep in job.reports}) == 1
    assert job.reports[0]["after_first"] != job.reports[0]["after_second"]


@pytest.mark.parametrize(
    ("script", "flags"),
    [
        pytest.param("join_uneven.py", (), id="torch-stock", marks=pytest.mark.long),
        pytest.param("join_uneven.py", ("--prague",), id="torch-prague"),
        pytest.param("tf_join_uneven.py", ("--prague",), id="tensorflow-prague"),
    ],
)
def test_join_with_uneven_shards_ends_each_epoch_with_one_model(tmp_path, script, flags):
    """``hvd.join()`` with uneven shards (12 to 36 steps over two epochs on
    4 ranks), as stock Horovod runs it and under the flag. Under the flag a rank that joins
    leaves the groups, the others average among themselves until they join too, and every
    ``join`` returns the same rank on every rank and leaves every rank with the same model
    (parameters and BatchNorm statistics). Stock Horovod's ranks end each epoch apart: a
    joined rank takes no more steps, and BatchNorm statistics are never averaged."""
    job = run_ranks(script, tmp_path, launcher_flags=flags, timeout=300).check()
    reports = job.reports
    assert [rep["steps"] for rep in reports] == [12, 20, 28, 36]
    for epoch in range(2):
        assert len({rep["joined"][epoch] for rep in reports}) == 1
        if flags:
            assert len({rep["after_join"][epoch] for rep in reports}) == 1, epoch
    if flags:
        # The first generation, with every rank active and none behind, puts every rank in a
        # group. How many more form depends on timing; that ranks still training meet in
        # groups after one has joined, and after a join, is tests/unit/test_join.py's.
        for rep in reports:
            assert rep["stats"]["averaged"] + rep["stats"]["owed"] >= 1, rep["stats"]


@pytest.mark.parametrize("controller", ["gloo", "mpi"])
def test_a_scripts_collectives_wait_without_spinning(tmp_path, controller):
    """Under the flag a rank waiting in a script's collective for a late rank sleeps between
    polls rather than spinning as Horovod's ``synchronize`` does: all-reduce, ``synchronize``,
    ``broadcast_parameters`` and ``allgather_object``. Spinning (stock Horovod: the main
    thread's CPU time near the wait's wall time) took the cores that Horovod's background
    loops need to negotiate Prague's process sets, and stalled global collectives for seconds
    (docs/design.md, *Busy waiting*)."""
    job = run_ranks(
        "waits.py", tmp_path, np=2, controller=controller, launcher_flags=("--prague",)
    ).check()
    assert len(job.reports) == 2, job.output[-3000:]
    assert all(rep["right"] for rep in job.reports), job.reports
    waiting = next(rep for rep in job.reports if rep["rank"] == 0)
    for name, (wall, cpu) in waiting["waits"].items():
        assert wall > 1.0, f"rank 0 did not wait in {name}: {wall:.2f} s"
        assert cpu < 0.2 * wall, f"rank 0 spun in {name}: {cpu:.2f} s of CPU in {wall:.2f} s"


@pytest.mark.parametrize("option", ["on", "off"])
def test_each_epoch_over_a_distributed_sampler_ends_with_one_model(tmp_path, option):
    """A plain script in Horovod's examples' shape (epochs over a ``DistributedSampler``, a test
    on every rank, the accuracy all-reduced; rank 0 alone also evaluates on its training part)
    on 4 ranks with random slowdowns. Under ``--prague`` every rank leaves each epoch's loop
    with the same model, BatchNorm statistics included, so the test evaluates one model, as in
    stock Horovod; with ``--prague-epoch-consensus off`` the ranks' models differ there (each
    evaluates its own) and are brought together by the accuracy's all-reduce after. Rank 0's
    lone pass takes no step and runs no consensus (it would wait for the others for ever)."""
    flags = ("--prague", "--prague-epoch-consensus", option)
    job = run_ranks("epoch_end_models.py", tmp_path, launcher_flags=flags, timeout=300).check()
    reports = job.reports
    assert len(reports) == 4
    assert len({rep["final"] for rep in reports}) == 1
    assert len({tuple(rep["accuracies"]) for rep in reports}) == 1
    epochs_alike = [len({rep["digests"][e] for rep in reports}) == 1 for e in range(3)]
    assert epochs_alike == ([True] * 3 if option == "on" else [False] * 3), epochs_alike


def test_each_validation_in_keras_fit_evaluates_one_model(tmp_path):
    """Two ``model.fit`` calls with validation data, 4 ranks with random slowdowns, under
    ``--prague``. In the first, where every rank validates (with Horovod's callbacks), each
    epoch's validation begins with the same trainable weights on every rank. In the second,
    rank 0 alone has validation data (as stock Horovod runs it, without
    ``MetricAverageCallback``): no consensus runs there, which would wait for ranks that never
    validate; rank 0 validates its own weights, and the job ends. Each ``fit`` ends with one
    model. (BatchNorm's moving statistics stay each rank's own, as with Horovod's Keras
    optimizer.)"""
    job = run_ranks(
        "keras_epoch_end_models.py", tmp_path, launcher_flags=("--prague",), timeout=300
    ).check()
    reports = job.reports
    assert len(reports) == 4
    assert len({rep["final"] for rep in reports}) == 1
    epochs_alike = [len({rep["every_rank"][e] for rep in reports}) == 1 for e in range(3)]
    assert epochs_alike == [True] * 3, epochs_alike
    assert [len(rep["rank_0"]) for rep in reports] == [2, 0, 0, 0]


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param((), id="stock", marks=pytest.mark.long),
        pytest.param(("--prague",), id="prague"),
    ],
)
def test_join_with_metrics_and_no_optimizer_ends_on_every_rank(tmp_path, flags):
    """8 ranks with uneven epochs that all-reduce metrics under one name and end each epoch
    with ``hvd.join()``, no optimizer (``workers/join_metrics.py fixed``). Under the flag,
    with nothing to average, rank 0 must still not exit (closing the Group Generator) before a
    rank that came out of Horovod's join late has rejoined it."""
    job = run_ranks("join_metrics.py", tmp_path, np=8, args=("fixed",), launcher_flags=flags)
    job.check()
    assert len(job.reports) == 8
    assert len({tuple(rep["joined"]) for rep in job.reports}) == 1, job.reports


@pytest.mark.long
@pytest.mark.parametrize("flags", [(), ("--prague",)], ids=["stock", "prague"])
def test_horovods_join_corrupts_the_joined_ranks_heap_on_a_new_name(tmp_path, flags):
    """A defect of Horovod 0.28.1, with or without Prague, kept here to notice when a patch
    or a new Horovod mends it (docs/limitations.md): the same script with a new
    metric name at every metric aborts the rank that joins first with a heap corruption
    (``free(): invalid next size``, ``malloc(): invalid size``, ``munmap_chunk(): invalid
    pointer``), 7 jobs of 7 stock and 1 of 1 under the flag."""
    job = run_ranks("join_metrics.py", tmp_path, np=8, args=("new",), launcher_flags=flags)
    assert job.returncode != 0, "the job ended cleanly: Horovod's join may be mended"
    assert re.search(r"free\(\)|malloc\(\)|munmap_chunk\(\)", job.output), job.output[-3000:]


@pytest.mark.parametrize(
    "variant", ["", "--metric-each-batch", "--leave-early"], ids=["plain", "metric", "join"]
)
def test_own_pace_gives_a_slow_rank_fewer_samples_in_as_many_batches(tmp_path, variant):
    """4 ranks of a plain script (``workers/own_pace.py``), the last one four times slower per
    sample, under ``--prague --prague-own-pace on``: from the second epoch on the slow rank
    trains on fewer samples than the others (by the last, under half), in as many batches;
    every epoch still sees each sample once; the per-batch ``OneCycleLR`` never runs past its
    end; one model at the end. Also where the script all-reduces its loss at every batch,
    where the fast ranks wait for the slow one: that wait is not their compute. And where the
    slow rank leaves the second epoch early for ``hvd.join()``: that pass measures nothing,
    and the next one keeps the shares measured before it."""
    flags = ("--prague", "--prague-own-pace", "on")
    args = (variant,) if variant else ()
    job = run_ranks("own_pace.py", tmp_path, launcher_flags=flags, args=args, timeout=300)
    job.check()
    reports = sorted(job.reports, key=lambda rep: rep["rank"])
    assert len(reports) == 4
    assert len({rep["final"] for rep in reports}) == 1
    assert len({tuple(rep["accuracies"]) for rep in reports}) == 1
    left = variant == "--leave-early"
    for epoch in range(5):
        if left and epoch == 1:
            assert [rep["batches"][1] for rep in reports] == [reports[0]["len_loader"]] * 3 + [3]
            continue
        assert {rep["batches"][epoch] for rep in reports} == {reports[0]["len_loader"]}
        indices = [i for rep in reports for i in rep["seen"][epoch]]
        assert len(indices) == 1000 and set(indices) == set(range(1000)), epoch
    taken = [[len(rep["seen"][epoch]) for rep in reports] for epoch in range(5)]
    assert taken[0] == [250] * 4, taken  # the first epoch measures
    # From the first measurement on the slow rank takes less; the shares converge over the
    # passes (a rank's fixed cost per batch dilutes the first pass's measured speeds).
    for epoch in range(1, 5):
        assert taken[epoch][3] < 0.8 * min(taken[epoch][:3]), taken
    assert 2 * taken[4][3] < min(taken[4][:3]), taken
    if left:  # the speeds of the first epoch, kept over the second
        assert taken[2][:3] == taken[1][:3], taken
