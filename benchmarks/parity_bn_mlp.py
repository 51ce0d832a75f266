"""Where an MLP with BatchNorm loses accuracy under --prague: each rank's own model against
the model the job ends with, stock and --prague side by side, seed by seed.

    .venv/bin/python benchmarks/parity_bn_mlp.py --ranks 8,16 --seeds 1,2,3

Runs ``workers/bn_mlp.py`` (its docstring says what each column is) stock and with
``--prague`` (plus ``--prague-args``), interleaved. Per row: the mean and lowest of the ranks'
own accuracies, the final model's, the final model's with recalibrated BatchNorm statistics,
and the training time (injected-delay model; with many ranks on few cores stock Horovod's
spinning waits slow it too: ``--poll`` adds stock All-Reduce waiting without spinning, the
baseline a time ratio is taken against). With ``--loader``
the worker trains in epochs over a ``DistributedSampler`` and tests after each, as Horovod's
examples do; the rows add the accuracy that test reports after the last epoch and its mean
over the epochs.
"""

from __future__ import annotations

import argparse
import shlex
import statistics

from _launch import horovodrun


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="8,16")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--base", type=float, default=0.05)
    parser.add_argument(
        "--prague-args",
        action="append",
        help="options added to --prague; repeat it for one --prague system per value",
    )
    parser.add_argument("--no-bn", action="store_true")
    parser.add_argument("--loader", action="store_true")
    parser.add_argument(
        "--poll", action="store_true", help="also stock All-Reduce waiting without spinning"
    )
    parser.add_argument("--train-size", type=int, default=4096)
    args = parser.parse_args()
    worker_args = ["--steps", str(args.steps), "--base", str(args.base)]
    worker_args += ["--train-size", str(args.train_size)]
    worker_args += ["--no-bn"] if args.no_bn else []
    worker_args += ["--loader"] if args.loader else []
    systems: dict[str, tuple[tuple[str, ...], list[str]]] = {"stock": ((), [])}
    if args.poll:
        systems["poll"] = ((), ["--poll-wait"])
    for i, extra in enumerate(args.prague_args or [""]):
        systems[f"prague{i or ''}"] = (("--prague", *shlex.split(extra)), [])
    for name, (flags, extra) in systems.items():
        print(f"# {name}: horovodrun {' '.join(flags)} ... {' '.join(extra)}")
    print(
        f"{'ranks':>5} {'seed':>4} {'system':>7} {'own mean':>8} {'own min':>8} "
        f"{'final':>7} {'recal.':>7} {'seconds':>8}" + (" reported  mean" if args.loader else "")
    )
    for np in (int(r) for r in args.ranks.split(",")):
        for seed in (int(s) for s in args.seeds.split(",")):
            for name, (flags, extra) in systems.items():
                r = horovodrun(
                    "bn_mlp.py",
                    np,
                    [*worker_args, *extra, "--seed", str(seed)],
                    flags=flags,
                    timeout=900,
                )
                print(
                    f"{np:>5} {seed:>4} {name:>7} {statistics.mean(r['own']):>8.4f} "
                    f"{min(r['own']):>8.4f} {r['final']:>7.4f} {r['recalibrated']:>7.4f} "
                    f"{r['seconds']:>8.1f}"
                    + (f" {r['reported']:>8.4f} {r['reported_mean']:.4f}" if args.loader else ""),
                    flush=True,
                )


if __name__ == "__main__":
    main()
