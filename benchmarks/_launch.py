"""Run a benchmark worker under horovodrun and return the JSON that rank 0 printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

WORKERS = Path(__file__).parent / "workers"
BIN = Path(sys.executable).parent


def horovodrun(
    worker: str,
    np: int,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    controller: str = "gloo",
    timeout: float = 600,
    flags: tuple[str, ...] = (),
) -> dict:
    command = [str(BIN / "horovodrun"), "-np", str(np), "-H", f"localhost:{np}"]
    command += (
        ["--gloo"]
        if controller == "gloo"
        else ["--mpi", "--mpi-args=--oversubscribe --allow-run-as-root"]
    )
    command += [*flags, sys.executable, str(WORKERS / worker), *(args or [])]
    full_env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        **(env or {}),
    }
    out = subprocess.run(command, capture_output=True, text=True, env=full_env, timeout=timeout)
    for line in out.stdout.splitlines():
        if "BENCH " in line:
            return json.loads(line.split("BENCH ", 1)[1])
    raise RuntimeError(
        f"{worker} on {np} ranks printed no result:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    )
