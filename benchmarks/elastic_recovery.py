"""What a lost worker costs an elastic job, stock Horovod against ``--prague``, side by side.

The elastic test's script (``tests/integration/workers/elastic_torch.py``): 4 ranks on
``localhost:2,127.0.0.1:2``, ``--min-np 2``, the first worker on ``127.0.0.1`` exits at step
12 of 40; the two survivors reset and finish. Per run: the survivors' recovery (from their
last step before the reset to their first after it; the slower survivor), the job's wall time
from the command to its end, split into its start (to any rank's first step), its training
(to any rank's last step) and its end; and whether the survivors ended with one model.
Runs alternate stock and Prague.

    .venv/bin/python benchmarks/elastic_recovery.py --rounds 3
    .venv/bin/python benchmarks/elastic_recovery.py --gloo-timeout 10   # survivors notice sooner

A survivor notices a lost worker when a collective with it fails: at once when the worker's
connection closes, or when a peer that noticed first resets its connections (``patches/0014``);
before that patch, a survivor waiting on such a peer noticed only at Horovod's Gloo time-out
(``HOROVOD_GLOO_TIMEOUT_SECONDS``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).parents[1]
WORKERS = REPO / "tests" / "integration" / "workers"
BIN = Path(sys.executable).parent


def run(flags: list[str], gloo_timeout: int) -> dict:
    with tempfile.TemporaryDirectory() as out:
        command = [
            str(BIN / "horovodrun"), "--gloo", "-np", "4", "--min-np", "2",
            "-H", "localhost:2,127.0.0.1:2", *flags,
            sys.executable, str(WORKERS / "elastic_torch.py"),
        ]  # fmt: skip
        env = {
            **os.environ,
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join([str(WORKERS), str(REPO)]),
            "PRAGUE_TEST_OUT": out,
            "PRAGUE_KILL_HOST": "127.0.0.1",
            "PRAGUE_KILL_STEP": "12",
            "HOROVOD_GLOO_TIMEOUT_SECONDS": str(gloo_timeout),
            "OMP_NUM_THREADS": "1",
        }
        began = time.monotonic()
        job = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
        wall = time.monotonic() - began
        reports = [json.loads(p.read_text()) for p in sorted(Path(out).glob("rank*.json"))]
    if job.returncode or len(reports) != 2:
        raise RuntimeError(
            f"{' '.join(flags) or 'stock'}: exit {job.returncode}, "
            f"{len(reports)} reports\n{job.stdout[-3000:]}{job.stderr[-3000:]}"
        )
    first_step = min(r["first_step_at"] for r in reports) - began
    last_step = max(r["last_step_at"] for r in reports) - began
    return {
        "recovery_s": max(max(r["recovery_s"], default=0.0) for r in reports),
        "wall_s": wall,
        "start_s": first_step,
        "train_s": last_step - first_step,
        "end_s": wall - last_step,
        "one_model": len({r["model"] for r in reports}) == 1,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gloo-timeout", type=int, default=20)
    args = parser.parse_args()
    systems = {"stock": [], "prague": ["--prague"]}
    results: dict[str, list[dict]] = {name: [] for name in systems}
    print(
        f"{'round':>5} {'system':>7} {'recovery s':>10} {'wall s':>7} {'start s':>7} "
        f"{'train s':>7} {'end s':>6} {'one model':>9}"
    )
    for i in range(args.rounds):
        for name, flags in systems.items():
            r = run(flags, args.gloo_timeout)
            results[name].append(r)
            print(
                f"{i:>5} {name:>7} {r['recovery_s']:>10.1f} {r['wall_s']:>7.1f} "
                f"{r['start_s']:>7.1f} {r['train_s']:>7.1f} {r['end_s']:>6.1f} "
                f"{str(r['one_model']):>9}",
                flush=True,
            )

    def median(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    recovery = {n: median(n, "recovery_s") for n in systems}
    wall = {n: median(n, "wall_s") for n in systems}
    print(
        f"median recovery: stock {recovery['stock']:.1f} s, prague {recovery['prague']:.1f} s "
        f"(prague / stock {recovery['prague'] / recovery['stock']:.2f}); median wall: stock "
        f"{wall['stock']:.1f} s, prague {wall['prague']:.1f} s "
        f"({wall['prague'] / wall['stock']:.2f})"
    )


if __name__ == "__main__":
    main()
