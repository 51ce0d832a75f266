"""What each Horovod process set a rank belongs to costs on this machine.

    .venv/bin/python benchmarks/process_set_cost.py              # 4 and 8 ranks, Gloo
    .venv/bin/python benchmarks/process_set_cost.py --controller mpi

Every rank is put in S pair sets (S divisions of the ranks into pairs), registered at init
("static", what horovod-prague does) or added after init ("dynamic"), and 1-float and
1M-float allreduces are timed on the global set and on a pair set. Times: slowest rank's
median, ms.
"""

from __future__ import annotations

import argparse

from _launch import horovodrun


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="4,8")
    parser.add_argument("--sets", default="0,1,2,3")
    parser.add_argument("--modes", default="static,dynamic")
    parser.add_argument("--controller", default="gloo", choices=["gloo", "mpi"])
    args = parser.parse_args()
    print(f"controller={args.controller}; ms per op (slowest rank's median)")
    print(
        f"{'ranks':>5} {'mode':>8} {'sets/rank':>9} {'global 1':>9} {'pair 1':>9} "
        f"{'global 1M':>10} {'pair 1M':>9}"
    )
    for np in (int(r) for r in args.ranks.split(",")):
        for mode in args.modes.split(","):
            for sets in (int(s) for s in args.sets.split(",")):
                if mode == "dynamic" and sets == 0:
                    continue
                r = horovodrun(
                    "process_set_cost.py",
                    np,
                    env={"MODE": mode, "SETS": str(sets)},
                    controller=args.controller,
                )
                cell = {
                    k: f"{r[k]:.1f}" if k in r else "-"
                    for k in ("global_1", "pair_1", "global_1M", "pair_1M")
                }
                print(
                    f"{np:>5} {mode:>8} {sets:>9} {cell['global_1']:>9} {cell['pair_1']:>9} "
                    f"{cell['global_1M']:>10} {cell['pair_1M']:>9}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
