"""How P-Reduce should wait: Horovod's busy ``synchronize`` against polling with a sleep.

    .venv/bin/python benchmarks/wait_cost.py [--repeats 2] [--epochs 10] [--controller gloo]

Runs ``examples/pytorch_digits.py`` on 4 ranks with ``--prague smart``, alternating the two
waits, and prints rank 0's time in P-Reduce, its slowest P-Reduce and GG request, and the
job's wall time. docs/design.md (*Busy waiting*) records a run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _launch import horovodrun

EXAMPLE = str(Path(__file__).parents[1] / "examples" / "pytorch_digits.py")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--controller", default="gloo", choices=("gloo", "mpi"))
    args = parser.parse_args()
    print("| wait | P-Reduce total s | slowest P-Reduce s | slowest next_group s | wall s |")
    print("|---|---|---|---|---|")
    for _ in range(args.repeats):
        for mode in ("spin", "poll"):
            r = horovodrun(
                "timed_example.py",
                4,
                [mode, EXAMPLE, "--epochs", str(args.epochs)],
                controller=args.controller,
                flags=("--prague", "smart"),
            )
            _, total, slowest = r["partial_allreduce"]
            print(
                f"| {mode} | {total:.2f} | {slowest:.3f} | {r['next_group'][2]:.3f} "
                f"| {r['wall']:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
