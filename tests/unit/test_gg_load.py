"""``benchmarks/gg_load.py``, the Group Generator's load benchmark: it runs, and its driver
checks every reply it timed."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gg_load  # noqa: E402

from horovod_prague.common.config import PragueConfig  # noqa: E402
from horovod_prague.common.generator_service import GroupGeneratorServer  # noqa: E402
from horovod_prague.common.group_generator import GroupGenerator  # noqa: E402
from horovod_prague.common.protocol import new_token  # noqa: E402
from horovod_prague.common.strategies import make_strategy  # noqa: E402
from horovod_prague.common.topology import Topology  # noqa: E402


@pytest.fixture
def server():
    gg = GroupGenerator(make_strategy(PragueConfig(strategy="smart"), Topology(4, 4)))
    with GroupGeneratorServer(gg, new_token(), gg_load.FINGERPRINT) as srv:
        yield srv


def answered(rank, requests):
    """Send ``requests`` prepared requests one by one and frame their replies."""
    rank.prepare(requests)
    rank.sock.setblocking(True)
    for _ in range(requests):
        rank.send(time.perf_counter())
        while not rank.replies():
            pass


def test_the_driver_verifies_every_reply_after_the_phase(server):
    rank = gg_load.Rank(server.address, server.token, 1, echo=False)
    answered(rank, 5)
    rank.prepare(3)  # sealed and not sent: the next phase sends them
    rank.verify()
    assert rank.verified == 5
    answered(rank, 4)
    rank.verify()
    assert rank.verified == 9


def test_a_tampered_reply_fails_verification(server):
    rank = gg_load.Rank(server.address, server.token, 1, echo=False)
    answered(rank, 3)
    rank.received[-1] ^= 1  # a bit of the last reply's body
    with pytest.raises(Exception, match="authentication"):
        rank.verify()


def test_a_short_run_prints_every_phase_and_no_problem():
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gg_load.py"), "--ranks", "8"]
        + ["--local-size", "4", "--strategies", "smart", "--rate", "500", "--duration", "2"]
        + ["--train", "none"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "| smart | saturated |" in run.stdout and "| smart | paced | 500 |" in run.stdout
    assert "counted problems" not in run.stdout
