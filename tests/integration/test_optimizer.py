"""horovod_prague.torch.DistributedOptimizer against the behaviours Horovod's optimizer tests
cover, on 2 real ranks (``workers/optimizer_checks.py`` holds the checks)."""

import pytest
from launch import run_ranks, run_worker_tests

pytestmark = pytest.mark.multirank


def test_optimizer_behaviours_on_two_ranks(tmp_path):
    run_worker_tests(tmp_path, "optimizer_checks.py", np=2, timeout=400)


@pytest.mark.parametrize("in_flight", ["1", "2"])
def test_overlapped_averaging_on_four_ranks(tmp_path, in_flight):
    run_worker_tests(tmp_path, "overlap_checks.py", env={"HOROVOD_PRAGUE_IN_FLIGHT": in_flight})


def test_reliability_defects_on_four_ranks(tmp_path):
    """A hand-written loop with a global collective, two optimizers, an LR scheduler made
    before wrapping, bool and uint8 buffers, and the step count in checkpoints."""
    run_worker_tests(tmp_path, "reliability_checks.py")


@pytest.mark.parametrize("scenario", ["uneven", "skipped", "ordering"])
def test_sync_every_with_uneven_or_skipped_steps_ends_with_one_model(tmp_path, scenario):
    """Uneven step counts under ``sync_every``: 1 step against 3 then ``hvd.allreduce`` and
    ``finish``; a rank skipping steps (as AMP does); ``finish([p1, p2])`` against an optimizer
    over ``[p2, p1]``."""
    job = run_ranks("sync_every_uneven.py", tmp_path, np=2, args=(scenario,), timeout=180)
    assert job.returncode == 0, job.output[-6000:]
    assert job.output.count(f"{scenario} ok") == 2
