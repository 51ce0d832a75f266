"""Integer buffers under the default overlapped averages: counters keep counting.

Before, an overlapped average set every integer tensor to the floor mean of the members' old
snapshots, discarding each increment made since: a counter that a forward pass increments,
with an average every step, stayed at 1, and so did BatchNorm's ``num_batches_tracked``.
``PRAGUE_INT_RANKS`` and ``PRAGUE_INT_STEPS`` make it a stress case (``scripts/stress.sh``).

Both models also hold int64 buffers whose sums over the ranks overflow int64, averaged by
the default overlapped averages and, with ``staleness=0``, by blocking ones, then by the
final world average: equal values must stay as they are, and different ones end at their
exact floor mean on every rank.
"""

import os

import pytest
from launch import run_ranks

pytestmark = pytest.mark.multirank

RANKS = int(os.environ.get("PRAGUE_INT_RANKS", "4"))
STEPS = int(os.environ.get("PRAGUE_INT_STEPS", "10"))
EQUAL = [2**62, 2**63 - 1, 7, -(2**63)]
"""What every rank's ``equal`` buffer holds (the workers' ``EQUAL``)."""

MODES = pytest.mark.parametrize(
    "env", [{}, {"HOROVOD_PRAGUE_STALENESS": "0"}], ids=["overlapped", "blocking"]
)


def assert_exact_int64_averages(reports: list[dict]) -> None:
    """``equal`` is left as it is; ``large``, different on each rank, ends at the exact floor
    mean of the ranks' starting values everywhere (group averages keep the total, and the
    final world average takes its floor mean)."""
    assert [(r["equal_start"], r["equal"]) for r in reports] == [(EQUAL, EQUAL)] * len(reports)
    starts = [r["large_start"] for r in reports]
    assert len({tuple(s) for s in starts}) == len(reports), starts
    floor_means = [sum(column) // len(starts) for column in zip(*starts, strict=True)]
    assert [r["large"] for r in reports] == [floor_means] * len(reports)


@MODES
def test_a_torch_model_s_counters_count_every_step_on_every_rank(tmp_path, env):
    """A plain script under ``--prague``: a counter buffer and BatchNorm1d(momentum=None)."""
    job = run_ranks(
        "integer_buffers.py",
        tmp_path,
        np=RANKS,
        args=(str(STEPS),),
        env=env,
        launcher_flags=("--prague",),
        timeout=120 + STEPS * RANKS / 4,
    ).check()
    reports = job.reports
    assert len(reports) == RANKS, job.output[-3000:]
    assert [(r["forwards"], r["num_batches_tracked"]) for r in reports] == [(STEPS, STEPS)] * RANKS
    assert len({tuple(r["running"]) for r in reports}) == 1
    assert len({r["digest"] for r in reports}) == 1
    assert_exact_int64_averages(reports)


@MODES
def test_a_keras_model_s_integer_variable_counts_every_step_on_every_rank(tmp_path, env):
    job = run_ranks(
        "tf_integer_buffers.py",
        tmp_path,
        np=RANKS,
        args=(str(STEPS),),
        env=env,
        timeout=180 + STEPS * RANKS / 4,
    ).check()
    reports = job.reports
    assert len(reports) == RANKS, job.output[-3000:]
    assert [(r["calls"], r["iterations"]) for r in reports] == [(STEPS, STEPS)] * RANKS
    assert len({r["digest"] for r in reports}) == 1
    assert_exact_int64_averages(reports)
