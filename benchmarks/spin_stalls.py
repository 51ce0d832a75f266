"""Stalls of global collectives on ranks that share cores, with Horovod's spinning
``synchronize`` and with Prague's, with and without pair process sets, side by side.

    .venv/bin/python benchmarks/spin_stalls.py [--ranks 4] [--rounds 3]

Each job is stock Horovod (no ``--prague``) on ``--ranks`` Gloo ranks: 40 rounds of
``broadcast_parameters`` (a 79,000-parameter model) and ``allgather_object``. With pairs,
every pair of ranks is a process set, as Prague's groups are; ``sleep`` imports
``horovod_prague.torch``, whose ``synchronize`` Horovod's modules then wait with. Prints rank
0's median and slowest call and the total per job. docs/design.md (*Busy waiting*) records a run.
"""

from __future__ import annotations

import argparse

from _launch import horovodrun


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(
        "| pair sets | wait | broadcast_parameters median / slowest (ms) "
        "| allgather_object median / slowest (ms) | total (s) |"
    )
    print("|---|---|---|---|---|")
    for _ in range(args.rounds):
        for pairs in ("1", "0"):
            for wait in ("spin", "sleep"):
                r = horovodrun("spin_stalls.py", args.ranks, [wait, pairs])
                b, g = r["broadcast_parameters"], r["allgather_object"]
                print(
                    f"| {'all' if pairs == '1' else 'none'} | {wait} "
                    f"| {b[0] * 1e3:.1f} / {b[1] * 1e3:.0f} | {g[0] * 1e3:.1f} / {g[1] * 1e3:.0f} "
                    f"| {b[2] + g[2]:.2f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
