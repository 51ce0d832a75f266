"""What Horovod's part of an elastic reset under Prague costs, per Horovod build, side by side.

    .venv/bin/python benchmarks/reset_cost.py [--ranks 4] [--rounds 3] [--venv DIR ...]

Each job (``workers/reset_cost.py``, Gloo, one host) initializes Horovod with dynamic process
sets, adds a set for every pair of ranks, runs one all-reduce and shuts down, ten times; it
prints each phase's median (the slowest rank's), and that of the sets and the all-reduce
together (a rank whose sets are done early waits in the all-reduce). With several ``--venv``
(virtual environments holding different Horovod builds, this checkout's ``.venv`` by
default), their jobs alternate, one at a time.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _launch import horovodrun

REPO = Path(__file__).parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--venv", type=Path, action="append")
    args = parser.parse_args()
    venvs = args.venv or [REPO / ".venv"]
    print(
        "| venv | init (ms) | pair sets added (ms) | first all-reduce (ms) | shutdown (ms) "
        "| sets and all-reduce (ms) |"
    )
    print("|---|---|---|---|---|---|")
    for _ in range(args.rounds):
        for venv in venvs:
            r = horovodrun("reset_cost.py", args.ranks, bin_dir=venv / "bin")
            cells = " | ".join(
                f"{r[k] * 1e3:.1f}"
                for k in ("init", "sets", "allreduce", "shutdown", "sets_to_allreduce")
            )
            print(f"| {venv} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
