"""horovod_prague.torch.DistributedOptimizer against the behaviours Horovod's optimizer tests
cover, on 2 real ranks (``workers/optimizer_checks.py`` holds the checks)."""

import pytest
from launch import run_ranks

pytestmark = pytest.mark.multirank


def test_optimizer_behaviours_on_two_ranks(tmp_path):
    job = run_ranks("run_pytest.py", tmp_path, np=2, args=("optimizer_checks.py",), timeout=400)
    assert job.returncode == 0, job.output[-8000:]
    assert "[0]<stdout>:" in job.output and " passed" in job.output


@pytest.mark.parametrize("in_flight", ["1", "2"])
def test_overlapped_averaging_on_four_ranks(tmp_path, in_flight):
    job = run_ranks(
        "run_pytest.py",
        tmp_path,
        np=4,
        args=("overlap_checks.py",),
        env={"HOROVOD_PRAGUE_IN_FLIGHT": in_flight},
        timeout=300,
    )
    assert job.returncode == 0, job.output[-8000:]
    assert "[0]<stdout>:" in job.output and " passed" in job.output


def test_reliability_defects_on_four_ranks(tmp_path):
    """A hand-written loop with a global collective, two optimizers, an LR scheduler made
    before wrapping, bool and uint8 buffers, and the step count in checkpoints."""
    job = run_ranks("run_pytest.py", tmp_path, np=4, args=("reliability_checks.py",), timeout=300)
    assert job.returncode == 0, job.output[-8000:]
    assert "[0]<stdout>:" in job.output and " passed" in job.output
