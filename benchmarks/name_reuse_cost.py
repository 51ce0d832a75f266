"""What Horovod's response cache saves a P-Reduce: one name reused against a new name per
average. Pair averages of 1 float and of 4 MB, interleaved in one job.

    .venv/bin/python benchmarks/name_reuse_cost.py            # 8 and 16 ranks, Gloo, 3 rounds
"""

from __future__ import annotations

import argparse

from _launch import horovodrun


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="8,16")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print("ms per pair average (slowest rank's median); fresh = a new name each time")
    print(f"{'ranks':>5} {'reused 1':>9} {'fresh 1':>9} {'reused 4MB':>11} {'fresh 4MB':>10}")
    for _ in range(args.rounds):
        for np in (int(r) for r in args.ranks.split(",")):
            r = horovodrun("name_reuse_cost.py", np)
            print(
                f"{np:>5} {r['reused_1']:>9.2f} {r['fresh_1']:>9.2f} "
                f"{r['reused_1M']:>11.2f} {r['fresh_1M']:>10.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
