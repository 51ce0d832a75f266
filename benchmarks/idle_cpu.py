"""CPU an idle rank spends, stock Horovod against ``--prague``, side by side.

    .venv/bin/python benchmarks/idle_cpu.py --ranks 4 --rounds 2
    .venv/bin/python benchmarks/idle_cpu.py --ranks 4 --rounds 2 --cycle-ms 5   # also --prague
                                                  # with HOROVOD_CYCLE_TIME=5 (default 1 ms)

Every rank sleeps in its main thread after one all-reduce; what its process spends meanwhile
is Horovod's background loop, which negotiates every process set the rank belongs to once
per cycle whether or not a tensor is pending, and, under ``--prague``, the Group Generator's
threads. On a machine with fewer cores than ranks this CPU is taken from the training.
"""

from __future__ import annotations

import argparse
import statistics

from _launch import horovodrun


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--cycle-ms",
        type=float,
        nargs="*",
        default=[],
        help="also run --prague with these HOROVOD_CYCLE_TIME values (Horovod's default: 1)",
    )
    args = parser.parse_args()
    systems: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
        "stock": ((), {}),
        "prague": (("--prague",), {}),
    }
    for cycle in args.cycle_ms:
        systems[f"prague, cycle {cycle:g} ms"] = (
            ("--prague",),
            {"HOROVOD_CYCLE_TIME": f"{cycle:g}"},
        )
    per_rank: dict[str, list[float]] = {name: [] for name in systems}
    for _ in range(args.rounds):
        for name, (flags, env) in systems.items():
            per_rank[name] += horovodrun("idle_cpu.py", args.ranks, flags=flags, env=env)["cores"]
    for name, cores in per_rank.items():
        print(
            f"{name:>22}: an idle rank spends {statistics.median(cores):.2f} cores "
            f"(median of {len(cores)}, {min(cores):.2f} to {max(cores):.2f}); "
            f"{args.ranks} ranks: {sum(cores) / args.rounds:.2f} cores"
        )


if __name__ == "__main__":
    main()
