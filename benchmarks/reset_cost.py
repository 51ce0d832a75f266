"""What Horovod's part of an elastic reset under Prague costs, per Horovod build, side by side.

    .venv/bin/python benchmarks/reset_cost.py [--ranks 4] [--rounds 3] [--venv DIR ...]

Each job (``workers/reset_cost.py``, Gloo, one host) initializes Horovod with dynamic process
sets, adds a set for every pair of ranks, runs one all-reduce and shuts down, ten times; it
prints each phase's median (the slowest rank's). With several ``--venv`` (virtual
environments holding different Horovod builds, this checkout's ``.venv`` by default), their
jobs alternate, one at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

WORKER = Path(__file__).parent / "workers" / "reset_cost.py"
REPO = Path(__file__).parents[1]


def job(venv: Path, ranks: int) -> dict[str, float]:
    bin_dir = venv / "bin"
    command = [
        str(bin_dir / "horovodrun"), "-np", str(ranks), "-H", f"localhost:{ranks}", "--gloo",
        str(bin_dir / "python"), str(WORKER),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    for line in out.stdout.splitlines():
        if "BENCH " in line:
            return json.loads(line.split("BENCH ", 1)[1])
    raise RuntimeError(f"{venv}: no result\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--venv", type=Path, action="append")
    args = parser.parse_args()
    venvs = args.venv or [REPO / ".venv"]
    print("| venv | init (ms) | pair sets added (ms) | first all-reduce (ms) | shutdown (ms) |")
    print("|---|---|---|---|---|")
    for _ in range(args.rounds):
        for venv in venvs:
            r = job(venv, args.ranks)
            cells = " | ".join(
                f"{r[k] * 1e3:.1f}" for k in ("init", "sets", "allreduce", "shutdown")
            )
            print(f"| {venv} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
