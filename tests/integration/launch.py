"""Launch a worker script on several local Horovod ranks and collect what each rank reported.

Workers call ``report(dict)`` (from ``workers/_report.py``); each rank's dict lands in a JSON
file that ``run_ranks`` reads back. A job that outlives ``timeout`` is killed with every process
it started, and the test fails with its output.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

WORKERS = Path(__file__).parent / "workers"
REPO = Path(__file__).parents[2]
BIN = Path(sys.executable).parent
CONTROLLERS = ("gloo", "mpi")

# A stock run of a scenario shows that the scenario is sound under stock Horovod; it tests
# Horovod, not this project, so CI leaves it out for time (marker ``long``, which
# scripts/stress.sh runs). The launcher flags of both runs, as parameters:
STOCK_OR_PRAGUE = [
    pytest.param((), id="stock", marks=pytest.mark.long),
    pytest.param(("--prague",), id="prague"),
]


STARTED_LOGS: list[Path] = []
"""Every job log started in this process, newest last (the conftest's failure summary)."""
LOOP_FAILURE = "Horovod background loop uncaught exception"


def loop_failures(logs: list[Path], limit: int = 24) -> list[str]:
    """The lines of ``logs`` where a rank's Horovod loop failed: the rank, the error and,
    with ``patches/0016``, the process set and negotiation step it waited in, the loop's
    cycle and every set's count, and with ``patches/0017`` its Gloo connections' progress."""
    lines = []
    for log in dict.fromkeys(logs):  # a test's jobs may share one log file
        if log.exists():
            lines += [
                f"{log.name}: {line}"
                for line in log.read_text(errors="replace").splitlines()
                if LOOP_FAILURE in line
            ]
    return lines[:limit]


@dataclasses.dataclass
class Job:
    returncode: int
    output: str
    reports: list[dict[str, Any]]
    log: Path | None = None
    """Where the job's whole output (every rank's lines) is kept."""

    def check(self) -> Job:
        assert self.returncode == 0, (
            f"job failed (exit {self.returncode}); every rank's output is in {self.log}. "
            f"Its end:\n{self.output[-6000:]}"
        )
        return self


def launch_command(np: int, controller: str) -> list[str]:
    horovodrun = [str(BIN / "horovodrun"), "-np", str(np), "-H", f"localhost:{np}"]
    if controller == "gloo":
        return [*horovodrun, "--gloo"]
    if controller == "mpi":
        return [*horovodrun, "--mpi", "--mpi-args=--oversubscribe --allow-run-as-root"]
    raise ValueError(f"unknown controller {controller!r}")


@dataclasses.dataclass
class RunningJob:
    """A job started by ``start_ranks``; ``wait`` collects it."""

    proc: subprocess.Popen
    out_dir: Path
    log: Path
    what: str

    def wait(self, timeout: float) -> Job:
        """The finished job; kills it with every process it started past ``timeout``."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_tree(self.proc.pid)
            self.proc.wait()
            output = self.log.read_text(errors="replace")
            raise AssertionError(
                f"{self.what} did not finish in {timeout:g}s; killed. Every rank's output is "
                f"in {self.log}. Its end:\n{output[-6000:]}"
            ) from None
        output = self.log.read_text(errors="replace")
        reports = [json.loads(p.read_text()) for p in sorted(self.out_dir.glob("rank*.json"))]
        reports.sort(key=lambda r: r.get("rank", 0))
        return Job(self.proc.returncode, output, reports, self.log)


def start_ranks(
    script: str,
    tmp_path: Path,
    np: int = 4,
    controller: str = "gloo",
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    launcher: list[str] | None = None,
    launcher_flags: tuple[str, ...] = (),
) -> RunningJob:
    """Start ``script`` on ``np`` ranks (``launcher``: the command before the script, by
    default ``horovodrun`` on this host); its whole output goes to a kept log."""
    out_dir = tmp_path / "reports"
    out_dir.mkdir(parents=True, exist_ok=True)
    full_env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PRAGUE_TEST_OUT": str(out_dir),
        # The checkout's package, even when the installed copy is older.
        "PYTHONPATH": os.pathsep.join([str(WORKERS), str(REPO), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        **(env or {}),
    }
    command = [
        *(launcher or launch_command(np, controller)),
        *launcher_flags,
        sys.executable,
        str(WORKERS / script),
        *args,
    ]
    log = _kept_log(tmp_path)
    STARTED_LOGS.append(log)
    with log.open("w") as sink:
        proc = subprocess.Popen(
            command,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=full_env,
            text=True,
            start_new_session=True,
        )
    return RunningJob(proc, out_dir, log, f"{script} on {np} ranks ({controller})")


def run_ranks(script: str, tmp_path: Path, timeout: float = 240, **options: Any) -> Job:
    """Run ``script`` to its end; ``options`` as for ``start_ranks``."""
    return start_ranks(script, tmp_path, **options).wait(timeout)


def discovery_script(tmp_path: Path, hosts: str) -> tuple[Path, Path]:
    """A host discovery script for ``horovodrun --host-discovery-script`` that prints the
    file it returns first, which holds ``hosts`` (``h1:2,h2:2``) one per line until rewritten:
    (hosts file, script)."""
    listed = tmp_path / "hosts"
    listed.write_text(hosts.replace(",", "\n") + "\n")
    script = tmp_path / "discover.sh"
    script.write_text(f"#!/bin/sh\ncat {listed}\n")
    script.chmod(0o755)
    return listed, script


def _kept_log(tmp_path: Path) -> Path:
    """A file for a job's whole output: under ``PRAGUE_TEST_LOGS`` when set (CI keeps it
    there), else in the test's temporary directory."""
    keep = os.environ.get("PRAGUE_TEST_LOGS")
    if not keep:
        return tmp_path / "job-output.log"
    folder = Path(keep)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{tmp_path.name}-{os.getpid()}-{len(list(folder.iterdir()))}.log"


def run_worker_tests(
    tmp_path: Path,
    tests: str,
    np: int = 4,
    env: dict[str, str] | None = None,
    timeout: float = 300,
) -> Job:
    """Run the pytest file ``tests`` from ``workers/`` on every rank (``run_pytest.py``): the
    job must pass, and rank 0 must have run its tests."""
    job = run_ranks("run_pytest.py", tmp_path, np=np, args=(tests,), env=env, timeout=timeout)
    assert job.returncode == 0, job.output[-8000:]
    assert "[0]<stdout>:" in job.output and " passed" in job.output
    return job


def _kill_tree(pid: int) -> None:
    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    procs = [root, *root.children(recursive=True)]
    # horovodrun starts each worker in a session of its own; find those by the marker env.
    for p in psutil.process_iter():
        try:
            if p.environ().get("PRAGUE_TEST_OUT") == root.environ().get("PRAGUE_TEST_OUT"):
                procs.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=10)
