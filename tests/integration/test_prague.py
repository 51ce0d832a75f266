"""P-Reduce and the Group Generator on 4 real Horovod ranks."""

import os
import statistics
from collections import defaultdict

import numpy as np
import pytest
from launch import BIN, run_ranks

pytestmark = pytest.mark.multirank


def _occurrences(reports):
    """(group, k) -> {rank: entry}: the k-th time each member ran that group."""
    seen = defaultdict(dict)
    for rep in reports:
        counter = defaultdict(int)
        for entry in rep["log"]:
            group = tuple(entry["group"])
            seen[(group, counter[group])][rep["rank"]] = entry
            counter[group] += 1
    return seen


@pytest.mark.parametrize(
    ("controller", "strategy"),
    [
        ("gloo", "smart"),
        ("gloo", "static"),
        ("gloo", "allreduce"),
        ("mpi", "smart"),
        ("mpi", "adpsgd"),
    ],
)
def test_partial_allreduce_gives_the_exact_group_mean(tmp_path, controller, strategy):
    # AD-PSGD's passive ranks never wait: one that runs ahead takes its steps alone and
    # finishes before the active ranks have paired with it, so it takes more steps to be
    # sure of several pairs.
    steps = 200 if strategy == "adpsgd" else 12
    job = run_ranks("group_means.py", tmp_path, controller=controller, args=(strategy, str(steps)))
    job.check()
    averaged = 0
    for (group, _), members in _occurrences(job.reports).items():
        if len(group) == 1:
            continue
        assert sorted(members) == list(group), f"{group} not run by all its members"
        for i in range(3):
            befores = [members[m]["before"][i] for m in group]
            expected = _mean(befores)
            for m in group:
                assert members[m]["after"][i] == expected, (group, i)
        averaged += 1
    # static and allreduce group every step; smart's first generation groups every rank.
    # How many more form depends on which rank asks when; AD-PSGD's passive ranks may even
    # finish before an active rank asks, so its count is not checked.
    assert averaged >= {"static": 6, "allreduce": 6, "smart": 1}.get(strategy, 0)
    finals = [rep["final"] for rep in job.reports]
    assert all(f == finals[0] for f in finals)


def _mean(nested_lists):
    if isinstance(nested_lists[0], list):
        return [_mean([x[i] for x in nested_lists]) for i in range(len(nested_lists[0]))]
    return sum(nested_lists) / len(nested_lists)


SOAK_RANKS = int(os.environ.get("PRAGUE_SOAK_RANKS", "4"))
SOAK_STEPS = int(os.environ.get("PRAGUE_SOAK_STEPS", "500"))


SOAK_CASES = [
    ("smart", 0, 1),
    ("static", 0, 1),
    ("random", 0, 1),
    ("adpsgd", 0, 1),
    ("allreduce", 0, 1),
    ("smart", 1, 1),
    ("smart", 1, 2),
]
# Uneven ends in CI for the default, the blocking smart and allreduce cases; the others are left
# out for time (marker ``long``).
SOAK_UNEVEN_IN_CI = {("smart", 0, 1), ("smart", 1, 2), ("allreduce", 0, 1)}


@pytest.mark.parametrize(
    ("ending", "strategy", "staleness", "in_flight"),
    [
        pytest.param(
            ending,
            *case,
            marks=[pytest.mark.long]
            if ending == "uneven" and case not in SOAK_UNEVEN_IN_CI
            else [],
        )
        for ending in ("even", "uneven")
        for case in SOAK_CASES
    ],
)
def test_many_steps_with_random_delays_end_cleanly(
    tmp_path, strategy, staleness, in_flight, ending
):
    """Blocking for every strategy, and overlapped with one and two averages in flight; 4
    ranks and 500 steps here, ``scripts/stress.sh`` runs 8 ranks and 2,000 steps."""
    job = run_ranks(
        "soak.py",
        tmp_path,
        np=SOAK_RANKS,
        args=(strategy, str(SOAK_STEPS), ending, str(staleness)),
        env={"HOROVOD_PRAGUE_IN_FLIGHT": str(in_flight)},
        timeout=400 * SOAK_STEPS * SOAK_RANKS / 2000,
    )
    job.check()
    reps = job.reports
    uneven = ending == "uneven"
    assert [r["steps"] for r in reps] == [
        SOAK_STEPS - (37 * r if uneven else 0) for r in range(SOAK_RANKS)
    ]
    for a in reps:
        assert len(a["executed"]) >= SOAK_STEPS // 10, "too few group averages logged"
        for b in reps:
            shared_a = [g for g in a["executed"] if b["rank"] in g]
            shared_b = [g for g in b["executed"] if a["rank"] in g]
            assert shared_a == shared_b, (a["rank"], b["rank"])
    assert len({r["digest"] for r in reps}) == 1, "ranks differ after the final average"


MIX_RANKS = int(os.environ.get("PRAGUE_MIX_RANKS", "4"))
MIX_STEPS = int(os.environ.get("PRAGUE_MIX_STEPS", "30"))


def test_mixed_training_with_join_ends_with_the_reference_model(tmp_path):
    """Two optimizers, BatchNorm, uneven steps, steps a rank skips on its own, a metric
    all-reduce every 10 steps, ``sync_every`` 7 and two averages in flight (the default),
    ``hvd.join()`` after each of two epochs (``workers/mixed_training.py``; 4 ranks and 30
    to 51 steps per epoch here, ``scripts/stress.sh`` runs more). No hang; after each join
    one model on every rank; at the end the parameters the steps every rank took give (the
    gradients are constants and equal weights keep the ranks' sum), and one BatchNorm
    count, at most the forward passes' mean."""
    flags = ("--prague", "--prague-weighting", "equal", "--prague-sync-every", "7")
    job = run_ranks(
        "mixed_training.py",
        tmp_path,
        np=MIX_RANKS,
        args=(str(MIX_STEPS),),
        launcher_flags=flags,
        timeout=120 + MIX_STEPS * MIX_RANKS,
    ).check()
    reps = job.reports
    assert len(reps) == MIX_RANKS, job.output[-3000:]
    for epoch in range(2):
        assert len({r["after_join"][epoch] for r in reps}) == 1, epoch
    totals = {k: sum(r["taken"][k] for r in reps) for k in ("body", "head")}
    first = reps[0]
    for name, start in first["start"].items():
        taken = totals["head" if name in ("weight", "bias") else "body"]
        step = first["lr"] * np.array(first["direction"][name]) * taken / MIX_RANKS
        expected = np.array(start) - step
        for r in reps:
            np.testing.assert_allclose(r["params"][name], expected, rtol=1e-4, atol=1e-3)
    counts = {r["num_batches_tracked"] for r in reps}
    assert len(counts) == 1
    assert 0 < counts.pop() <= sum(r["forwards"] for r in reps) // MIX_RANKS


@pytest.mark.timing
def test_a_straggler_slows_only_its_own_groups(tmp_path):
    """Rank 3 turns 300 ms slower per step halfway through each job.

    With smart (threshold 2) the other ranks keep at least 40% of their own calm rate from
    the same job and run at least 3x the straggler's rate; with allreduce they drop to the
    straggler's pace. A rank's rate is 1 / its median step time in each phase's second half;
    "the other ranks' rate" is the median over ranks 0-2 (the slowest is printed too: on this
    machine one of them occasionally runs at only ~2x the straggler, see docs/design.md).
    """

    def rates(strategy):
        job = run_ranks("straggler.py", tmp_path / strategy, args=(strategy, "8", "0.3"))
        return job.check().reports

    smart, allreduce = rates("smart"), rates("allreduce")
    calm = statistics.median(r["calm"] for r in smart[:3])
    with_straggler = statistics.median(r["straggling"] for r in smart[:3])
    slowest = min(r["straggling"] for r in smart[:3])
    allreduce_fast = statistics.median(r["straggling"] for r in allreduce[:3])
    print(
        f"steps/s, median of ranks 0-2: smart calm {calm:.1f}, smart with straggler "
        f"{with_straggler:.1f} (slowest {slowest:.1f}, straggler "
        f"{smart[3]['straggling']:.1f}); allreduce with straggler {allreduce_fast:.1f} "
        f"(straggler {allreduce[3]['straggling']:.1f})"
    )
    assert with_straggler >= 0.4 * calm
    assert with_straggler >= 3 * smart[3]["straggling"]
    assert allreduce_fast <= 1.5 * allreduce[3]["straggling"]


def test_tensorflow_variables_get_the_group_mean(tmp_path):
    job = run_ranks("tf_group_means.py", tmp_path, timeout=300).check()
    first = {rep["rank"]: rep["log"][0] for rep in job.reports}
    for rank, entry in first.items():
        group = entry["group"]
        assert group == ([0, 1] if rank < 2 else [2, 3])  # the static schedule's first step
        assert entry["values"][0] == [sum(group) / 2] * 3
        assert entry["values"][1] == [[10.0 * sum(group) / 2] * 2] * 2
    finals = [rep["final"] for rep in job.reports]
    assert all(f == finals[0] for f in finals)
    assert finals[0][0] == [1.5] * 3
    by_rank = {rep["rank"]: rep["overlapped"] for rep in job.reports}
    averaged = 0
    for steps in by_rank.values():
        for i, step in enumerate(steps):
            group = step["group"]
            assert group is not None, "nothing was in flight, so a group must start"
            if len(group) < 2:
                continue
            averaged += 1
            # The group's mean of the snapshots, plus the update made while in flight.
            mean = np.mean([by_rank[m][i]["snapshot"] for m in group], axis=0)
            np.testing.assert_allclose(step["after"], mean - 1.0, rtol=1e-5, atol=1e-5)
            assert step["counter"] == sum(10 * m + 3 for m in group) // len(group)
    assert averaged > 0


@pytest.mark.parametrize("controller", ["gloo", "mpi"])
def test_horovod_adds_process_sets_at_once(tmp_path, controller):
    """``add_process_sets`` (``patches/0022``), with which Prague adds its pair sets after each
    elastic reset: every set in the order given, each one working; a batch holding a set that
    exists adds none of its sets."""
    job = run_ranks("added_sets.py", tmp_path, np=4, controller=controller).check()
    pairs = [[a, b] for a in range(4) for b in range(a + 1, 4)]
    for rep in job.reports:
        assert rep["sets"] == pairs
        mine = [p for p in pairs if rep["rank"] in p]
        assert rep["means"] == {str(p): sum(p) / 2 for p in mine}
        assert "duplicate process set" in rep["refused"]
        assert rep["table"] == sorted([[0, 1, 2, 3], *pairs])


def test_collectives_enqueued_as_the_loop_fails_all_end(tmp_path):
    """Rank 1 leaves while both ranks' threads enqueue grouped all-reduces back to back; every
    handle of rank 0 completes (with Horovod's shut-down error), each thread's next enqueue is
    refused with it, and rank 0 ends (``patches/0025``). Stock Horovod kept a collective that
    checked for the shutdown just before the loop finalized its queue and added its tensors
    just after, unrun: a wait on it lasted to its deadline, and on the global process set its
    name was held into the next world, where an elastic survivor's first average was refused
    as a duplicate. And its loop released the finalized tensors holding the queue's lock,
    which needs the GIL that an enqueuing thread held while it waited for that lock: rank 0
    hung in 6 of 33 runs with 4 to 6 busy processes beside it."""
    job = run_ranks("enqueues_as_loop_fails.py", tmp_path, np=2, timeout=120).check()
    assert [rep["rank"] for rep in job.reports] == [0], job.output[-3000:]
    rep = job.reports[0]
    assert len(rep["refused"]) == 4, rep
    assert all("Horovod has been shut down" in error for error in rep["refused"]), rep
    assert rep["enqueued"] > 0 and rep["unfinished"] == 0, rep


@pytest.mark.long
@pytest.mark.parametrize("sets", ["static", "dynamic"])
def test_many_starts_of_horovod_under_the_flag_on_two_hosts(tmp_path, sets):
    """25 rounds of ``init``, a broadcast, 4 Prague steps and ``shutdown`` in one process on
    4 ranks of two host names (``workers/restarts.py``), with Prague's sets given to ``init``
    or added after it: a soak for a rare Gloo time-out at a job's start (docs/limitations.md),
    which scripts/stress.sh runs."""
    launcher = [str(BIN / "horovodrun"), "-np", "4", "-H", "localhost:2,127.0.0.1:2", "--gloo"]
    args = ("25", "dynamic") if sets == "dynamic" else ("25",)
    job = run_ranks(
        "restarts.py", tmp_path, args=args, launcher=launcher, launcher_flags=("--prague",)
    )
    job.check()
    assert [rep["rounds"] for rep in job.reports] == [25, 25, 25, 25]
