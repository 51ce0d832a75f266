"""Run a benchmark worker under horovodrun and return the JSON that rank 0 printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

WORKERS = Path(__file__).parent / "workers"
ROOT = WORKERS.parent.parent
"""The checkout: workers import its horovod_prague, not an older installed copy."""
BIN = Path(sys.executable).parent


def horovodrun(
    worker: str,
    np: int,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    controller: str = "gloo",
    timeout: float = 600,
    flags: tuple[str, ...] = (),
    bin_dir: Path = BIN,
) -> dict:
    """``bin_dir``: the virtual environment's ``bin`` to run from (this Python's by default)."""
    command = [str(bin_dir / "horovodrun"), "-np", str(np), "-H", f"localhost:{np}"]
    command += (
        ["--gloo"]
        if controller == "gloo"
        else ["--mpi", "--mpi-args=--oversubscribe --allow-run-as-root"]
    )
    python = sys.executable if bin_dir == BIN else str(bin_dir / "python")
    command += [*flags, python, str(WORKERS / worker), *(args or [])]
    full_env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        **(env or {}),
    }
    out = subprocess.run(command, capture_output=True, text=True, env=full_env, timeout=timeout)
    for line in out.stdout.splitlines():
        if "BENCH " in line:
            return json.loads(line.split("BENCH ", 1)[1])
    raise RuntimeError(
        f"{worker} on {np} ranks printed no result:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    )
