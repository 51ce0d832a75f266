"""The speed-up over All-Reduce that the fault scenario's slowdowns allow, seed by seed
(``faults.bounds_by_seed``): every rank takes the same steps between commits, so
ranks free of each other gain only within a window. A model of the delays, no job is run.

    .venv/bin/python benchmarks/elastic_bound.py --commit-every 100,25
    .venv/bin/python benchmarks/elastic_bound.py --host-size 1   # 8 hosts of one rank
"""

from __future__ import annotations

import argparse

from horovod_prague.bench import faults


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=250)
    parser.add_argument("--kill", type=faults.parse_kill, default=(5, 100))
    parser.add_argument("--commit-every", default="100,25")
    parser.add_argument("--scenario", default="random")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--host-size", type=int, help="ranks per host, all lost with the killed one (default half)"
    )
    args = parser.parse_args()
    print(f"{'commit every':>12} " + " ".join(f"{f'seed {s}':>7}" for s in range(args.seeds)))
    for commit_every in (int(c) for c in args.commit_every.split(",")):
        bounds = faults.bounds_by_seed(
            args.scenario,
            args.ranks,
            args.steps,
            range(args.seeds),
            args.kill,
            commit_every,
            host_size=args.host_size,
        )
        print(f"{commit_every:>12} " + " ".join(f"{b:>6.2f}x" for b in bounds))


if __name__ == "__main__":
    main()
