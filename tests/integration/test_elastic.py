"""Horovod elastic under the flag (issue 26): a plain ``hvd.elastic.run`` script whose
worker dies mid-training; the survivors reset and go on.

Two "hosts" on this machine, as Horovod's own elastic tests make them: ``localhost`` and
``127.0.0.1``. The elastic driver drops the host of a failed worker, so the survivors are the
other host's ranks.
"""

from __future__ import annotations

import pytest
from launch import BIN, run_ranks

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
    # A survivor's collective waits this long for the dead worker before Horovod resets.
    "HOROVOD_GLOO_TIMEOUT_SECONDS": "20",
}


@pytest.mark.parametrize(
    ("script", "flags"),
    [
        ("elastic_torch.py", ()),
        ("elastic_torch.py", ("--prague",)),
        ("tf_elastic.py", ("--prague",)),
    ],
    ids=["torch-stock", "torch-prague", "tensorflow-prague"],
)
def test_a_lost_worker_leaves_survivors_that_finish_with_one_model(tmp_path, script, flags):
    """Stock Horovod and the flag alike: the worker on ``127.0.0.1`` dies at step 12; the two
    on ``localhost`` reset (under the flag: a new Group Generator and process sets for the
    world of 2) and take the 40 steps, restarting from the last commit. Under the flag they
    end with the same model, BatchNorm statistics included (before: every survivor aborted
    in Horovod's shutdown, "terminate called after throwing an instance of
    'gloo::IoException'"; and, once in a CI run, a TensorFlow survivor's op on a process set
    that Horovod's way out had removed raised "Process set provided does not exist", not a
    reset: ``patches/0010``)."""
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
        assert rep["step"] == 40 and rep["resets"] == [2]
    assert len({rep["parameters"] for rep in reports}) == 1
    if flags:
        assert len({rep["model"] for rep in reports}) == 1
