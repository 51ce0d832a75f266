"""The installed stack: patched Horovod with both controllers, on torch and TensorFlow."""

import subprocess
import sys

import pytest
from launch import run_ranks


@pytest.mark.parametrize("framework", ["horovod.torch", "horovod.tensorflow"])
def test_horovod_imports_with_gloo_and_mpi(framework):
    code = f"import {framework} as hvd; print(hvd.gloo_built(), hvd.mpi_built())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ["True", "True"]


@pytest.mark.multirank
@pytest.mark.parametrize("controller", ["gloo", "mpi"])
def test_allreduce_on_a_process_set_is_exact(tmp_path, controller):
    job = run_ranks("process_set_allreduce.py", tmp_path, np=4, controller=controller).check()
    assert [r["rank"] for r in job.reports] == [0, 1, 2, 3]
    for r in job.reports:
        low = r["rank"] < 2
        assert r["size"] == 4
        assert r["set_ranks"] == ([0, 1] if low else [2, 3])
        assert r["summed"] == ([3, 30] if low else [7, 70])
        assert r["averaged"] == ([0.5] * 3 if low else [2.5] * 3)


@pytest.mark.multirank
def test_plain_mpirun_launch(tmp_path):
    mpirun = [
        "mpirun",
        "-np",
        "4",
        "--oversubscribe",
        "--allow-run-as-root",
        "-x",
        "PATH",
        "-x",
        "PRAGUE_TEST_OUT",
        "-x",
        "PYTHONPATH",
    ]
    job = run_ranks("process_set_allreduce.py", tmp_path, launcher=mpirun).check()
    assert [r["summed"] for r in job.reports] == [[3, 30], [3, 30], [7, 70], [7, 70]]
