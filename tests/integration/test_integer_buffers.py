"""Integer buffers under the default overlapped averages: counters keep counting.

Before, an overlapped average set every integer tensor to the floor mean of the members' old
snapshots, discarding each increment made since: a counter that a forward pass increments,
with an average every step, stayed at 1, and so did BatchNorm's ``num_batches_tracked``.
``PRAGUE_INT_RANKS`` and ``PRAGUE_INT_STEPS`` make it a stress case (``scripts/stress.sh``).
"""

import os

import pytest
from launch import run_ranks

pytestmark = pytest.mark.multirank

RANKS = int(os.environ.get("PRAGUE_INT_RANKS", "2"))
STEPS = int(os.environ.get("PRAGUE_INT_STEPS", "10"))


def test_a_torch_model_s_counters_count_every_step_on_every_rank(tmp_path):
    """A plain script under ``--prague``: a counter buffer and BatchNorm1d(momentum=None)."""
    job = run_ranks(
        "integer_buffers.py",
        tmp_path,
        np=RANKS,
        args=(str(STEPS),),
        launcher_flags=("--prague",),
        timeout=120 + STEPS * RANKS / 4,
    ).check()
    reports = job.reports
    assert len(reports) == RANKS, job.output[-3000:]
    assert [(r["forwards"], r["num_batches_tracked"]) for r in reports] == [(STEPS, STEPS)] * RANKS
    assert len({tuple(r["running"]) for r in reports}) == 1
    assert len({r["digest"] for r in reports}) == 1


def test_a_keras_model_s_integer_variable_counts_every_step_on_every_rank(tmp_path):
    job = run_ranks(
        "tf_integer_buffers.py",
        tmp_path,
        np=RANKS,
        args=(str(STEPS),),
        timeout=180 + STEPS * RANKS / 4,
    ).check()
    reports = job.reports
    assert len(reports) == RANKS, job.output[-3000:]
    assert [(r["calls"], r["iterations"]) for r in reports] == [(STEPS, STEPS)] * RANKS
    assert len({r["digest"] for r in reports}) == 1
