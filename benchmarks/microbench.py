"""Micro-benchmark of horovod-prague on this machine: Group Generator latency and P-Reduce.

    .venv/bin/python benchmarks/microbench.py            # 4 and 8 ranks, Gloo
    .venv/bin/python benchmarks/microbench.py --ranks 4 --sizes 1000000

For each rank count and group size (2 and 4) one horovodrun job measures, side by side:
next_group latency (median, p99) with rank 0 idle and with rank 0 training, and the time of a
P-Reduce against a bare Horovod allreduce on the same process set (the plugin's overhead) and
a global Horovod allreduce of the same size. Times are the slowest rank's median, in ms.
"""

from __future__ import annotations

import argparse

from _launch import horovodrun


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="4,8")
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--controller", default="gloo", choices=["gloo", "mpi"])
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"controller={args.controller}; times in ms (slowest rank's median)")
    print(
        f"{'ranks':>5} {'group':>5} {'sets/rank':>9} {'GG idle p50/p99':>16} "
        f"{'GG busy p50/p99':>16} " + " ".join(f"{'n=' + format(n, ','):>34}" for n in sizes)
    )
    print(" " * 56 + " ".join(f"{'P-Reduce / bare set / global':>34}" for _ in sizes))
    for np in (int(r) for r in args.ranks.split(",")):
        for k in (2, 4):
            r = horovodrun("microbench.py", np, [str(k), args.sizes], controller=args.controller)
            idle, busy = r["gg_rank0_idle"], r["gg_rank0_training"]
            cells = []
            for n in sizes:
                p, b, g = (1e3 * r[f"{kind}_{n}"] for kind in ("preduce", "bare_set", "global"))
                cells.append(f"{p:>10.1f} / {b:>8.1f} / {g:>8.1f}")
            print(
                f"{np:>5} {k:>5} {r['sets_per_rank']:>9} "
                f"{idle['median_ms']:>7.2f}/{idle['p99_ms']:<8.2f} "
                f"{busy['median_ms']:>7.2f}/{busy['p99_ms']:<8.2f} " + " ".join(cells),
                flush=True,
            )


if __name__ == "__main__":
    main()
