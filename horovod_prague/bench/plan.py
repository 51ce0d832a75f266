"""What a ``prague-bench`` run does: its command line, checked, as a :class:`Plan`.

Every check of the options' combinations lives here, so that a wrong command stops with an
error naming the option before any host is set up or any job runs; ``cli`` only runs a plan.

>>> plan, out = parse_args(["--quick"])
>>> plan.ranks, plan.systems
([8], ['allreduce', 'smart', 'prague'])
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path
from typing import Any

from ..common.config import PragueConfig
from ..runner import flag
from . import faults
from .report import BASELINES
from .workload import FRAMEWORKS, SAMPLING, SCENARIOS, WORKLOADS

DESCRIPTION = "All-Reduce and Prague's designs side by side, under injected slowdowns."

SPLITS = ("bound", "fixed")
"""How a Prague job's steps are shared among its ranks (``prague-bench --split``)."""

SYSTEMS: dict[str, tuple[str, list[str]]] = {
    "allreduce": ("stock Horovod All-Reduce", []),
    "allreduce-poll": ("stock All-Reduce, waiting without spinning", []),
    "allreduce-balanced": (
        "stock All-Reduce, no spin, batches sized by measured speed (--split fixed)",
        [],
    ),
    "adpsgd": ("AD-PSGD pairs", ["--prague", "adpsgd", "--prague-staleness", "0"]),
    "random": ("random division", ["--prague", "random", "--prague-staleness", "0"]),
    "static": ("Prague static", ["--prague", "static", "--prague-staleness", "0"]),
    "smart": ("Prague smart (paper)", ["--prague", "smart", "--prague-staleness", "0"]),
    "prague": ("horovod-prague default (--prague)", ["--prague"]),
    "prague-uncached": (
        "horovod-prague default, Horovod's response cache off",
        ["--prague", "--cache-capacity", "0"],
    ),
    faults.REFERENCE: ("stock All-Reduce, no fault (--fault's reference)", []),
}


ON_REQUEST = (faults.REFERENCE, "prague-uncached", "allreduce-balanced")
"""Systems the full matrix leaves out: run them by naming them in ``--systems``."""


def system_flags(spec: str) -> tuple[str, list[str]]:
    """A system's label and ``horovodrun`` flags; ``NAME/option=value/...`` overrides options.

    >>> system_flags("prague/staleness=1/group-size=4")[1]
    ['--prague', '--prague-staleness', '1', '--prague-group-size', '4']
    >>> system_flags("prague/strategy=random")[1]
    ['--prague', '--prague', 'random']
    """
    name, *overrides = spec.split("/")
    if name not in SYSTEMS:
        raise ValueError(f"unknown system {name!r}; choose from {', '.join(SYSTEMS)}")
    label, flags = SYSTEMS[name]
    if overrides and not flags:
        raise ValueError(f"{spec!r}: {name} takes no Prague options")
    flags = list(flags)
    options = {f.name for f in dataclasses.fields(PragueConfig)}
    for override in overrides:
        option, sep, value = override.partition("=")
        option = option.replace("-", "_")
        if not sep or not value or option not in options:
            raise ValueError(
                f"{spec!r}: expected option=value after '/', with an option of "
                f"{', '.join(sorted(options))}; got {override!r}"
            )
        flags += [flag(option), value]
    return (f"{label}, {', '.join(overrides)}" if overrides else label), flags


@dataclasses.dataclass(frozen=True)
class Plan:
    """One run: every job's options, as ``parse_args`` checked them (saved with the results)."""

    ranks: list[int]
    scenarios: list[str]
    systems: list[str]
    seeds: int
    first_seed: int
    steps: int
    compute_ms: float
    params: int
    batch: int
    lr: float
    framework: str
    sampling: str
    target: float
    timeout: float
    hosts: int | None = None
    slots: int | None = None
    link: str | None = None
    fault: str | None = None
    commit_every: int = 25
    readmit_after: int | None = None
    workload: str = "mnist1d"
    split: str = "fixed"
    slow_host: float | None = None
    compute_by: str = "sleep"
    cpu_units_per_ms: float | None = None
    """With ``compute_by="cpu"``: the work per millisecond, measured at the start of the run."""


def parse_args(argv: list[str] | None) -> tuple[Plan, Path]:
    """The plan and the output folder of a command line; argparse's error (exit 2) on a bad one."""
    ap = argparse.ArgumentParser(prog="prague-bench", description=DESCRIPTION)
    ap.add_argument("--quick", action="store_true", help="a short run (about 4 minutes)")
    ap.add_argument("--ranks", help="comma-separated rank counts (default 4,8; quick 8)")
    ap.add_argument("--scenarios", help=f"comma-separated, of {', '.join(SCENARIOS)}")
    ap.add_argument(
        "--systems",
        help=f"comma-separated, of {', '.join(SYSTEMS)}; NAME/option=value/... sets Prague "
        "options, as in prague/staleness=1",
    )
    ap.add_argument("--seeds", type=int, help="seeds per cell (default 3)")
    ap.add_argument("--first-seed", type=int, default=0, help="seeds run from this one on")
    ap.add_argument("--steps", type=int, help="All-Reduce's steps per rank (default 250)")
    ap.add_argument("--compute-ms", type=float, help="compute time of a normal step (100)")
    ap.add_argument("--params", type=int, help="synthetic floats averaged with the model (1M)")
    ap.add_argument(
        "--workload",
        choices=WORKLOADS,
        default="mnist1d",
        help="; ".join(f"{name}: {w.description}" for name, w in WORKLOADS.items())
        + " (all but mnist1d: PyTorch)",
    )
    ap.add_argument("--batch", type=int, help="examples per step (default: the workload's)")
    ap.add_argument("--lr", type=float, help="learning rate (default: the workload's)")
    ap.add_argument(
        "--framework",
        choices=FRAMEWORKS,
        default="torch",
        help="train with PyTorch or TensorFlow (a tf.function step with DistributedGradientTape)",
    )
    ap.add_argument(
        "--sampling",
        choices=SAMPLING,
        default="shard",
        help="shard: each rank draws from its fixed 1/n of the training set (as "
        "DistributedSampler without set_epoch); epoch: from a 1/n drawn anew at each of its "
        "passes (DistributedSampler with set_epoch, as in Horovod's examples); whole: from "
        "all of it, in its own order",
    )
    ap.add_argument("--target", type=float, help="test accuracy to time (the workload's)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds a job may take")
    ap.add_argument("--out", type=Path, help="output folder (default bench-results/<time>)")
    ap.add_argument(
        "--hosts",
        metavar="HxS",
        help="run every job on H emulated hosts of S ranks each (root; sets --ranks to H*S)",
    )
    ap.add_argument(
        "--link",
        metavar="RATE",
        help="with --hosts: each host's link limited to RATE each way (1gbit, 250mbit)",
    )
    ap.add_argument(
        "--fault",
        metavar="R@K",
        help="run every system under Horovod elastic (on two hosts of this machine, or on "
        f"--hosts); rank R dies at its step K (PyTorch; '{faults.REFERENCE}', without fault, "
        "joins each block)",
    )
    ap.add_argument(
        "--commit-every", type=int, default=25, help="with --fault: steps between commits"
    )
    ap.add_argument(
        "--readmit-after",
        type=int,
        metavar="S",
        help="with --fault: the lost host comes back S seconds after the driver dropped it "
        "(Horovod's --blacklist-cooldown-range S S), and its new ranks join at the survivors' "
        "next commit; take S longer than the survivors' recovery, which is then measured",
    )
    ap.add_argument(
        "--split",
        choices=SPLITS,
        default="fixed",
        help="how a job's steps are shared among its ranks: fixed (the default), every rank "
        "takes --steps batches from a DataLoader over a DistributedSampler, as a plain script "
        "does (PyTorch, --sampling epoch or shard), which own_pace re-deals; bound, each "
        "Prague rank is given in advance the steps it can take by the time all stop together, "
        "from the delays to come: no script has this, so it is an upper bound",
    )
    ap.add_argument(
        "--compute-by",
        choices=("sleep", "cpu"),
        default="sleep",
        help="a step's injected compute: sleep (a GPU's, which no host slows) or cpu (a fixed "
        "amount of arithmetic, which --slow-host's quota stretches)",
    )
    ap.add_argument(
        "--slow-host",
        type=float,
        metavar="CORES",
        help="with --hosts: the last host's ranks get CORES cores of CPU time in all (a cgroup "
        "quota): a host that is slower in everything it does",
    )
    a = ap.parse_args(argv)
    hosts = slots = None
    if a.hosts:
        from .hosts import parse_layout

        try:
            hosts, slots = parse_layout(a.hosts)
        except ValueError as e:
            ap.error(f"--hosts: {e}")
        if a.ranks and [int(r) for r in a.ranks.split(",")] != [hosts * slots]:
            ap.error(f"--ranks {a.ranks} contradicts --hosts {a.hosts} ({hosts * slots} ranks)")
        a.ranks = str(hosts * slots)
    if a.link:
        if not a.hosts:
            ap.error("--link needs --hosts: it limits the links between emulated hosts")
        from .hosts import parse_rate

        try:
            parse_rate(a.link)
        except ValueError as e:
            ap.error(f"--link: {e}")
    quick = {
        "ranks": "8",
        "scenarios": "random",
        "systems": "allreduce,smart,prague",
        "seeds": 1,
        "steps": 120,
        "compute_ms": 100.0,
        "params": 1_000_000,
    }
    full = {
        "ranks": "4,8",
        "scenarios": ",".join(SCENARIOS),
        "systems": ",".join(s for s in SYSTEMS if s not in ON_REQUEST),
        "seeds": 3,
        "steps": 250,
        "compute_ms": 100.0,
        "params": 1_000_000,
    }
    defaults = quick if a.quick else full
    if a.fault:
        defaults = {**defaults, "ranks": "8", "scenarios": "random"}

    def pick(name: str) -> Any:
        value = getattr(a, name)
        return defaults[name] if value is None else value

    ranks = [int(r) for r in str(pick("ranks")).split(",")]
    scenarios = str(pick("scenarios")).split(",")
    systems = str(pick("systems")).split(",")
    for s in scenarios:
        if s not in SCENARIOS:
            ap.error(f"--scenarios: unknown {s!r}; choose from {', '.join(SCENARIOS)}")
    for s in systems:
        try:
            system_flags(s)
        except ValueError as e:
            ap.error(f"--systems: {e}")
    if not set(BASELINES) & set(systems):
        ap.error(
            "--systems: must include allreduce or allreduce-poll: every ratio is taken to the "
            "faster of those that ran"
        )
    if a.workload != "mnist1d" and a.framework != "torch":
        ap.error(f"--workload {a.workload}: PyTorch only (no --framework)")
    if "allreduce-poll" in systems and a.framework != "torch":
        ap.error(
            "--systems: allreduce-poll is PyTorch's; TensorFlow's eager Horovod collectives "
            "already wait without spinning"
        )
    if any(n < 2 for n in ranks):
        ap.error("--ranks: every job needs at least 2 ranks")
    if a.slow_host is not None and not a.hosts:
        ap.error("--slow-host needs --hosts: it slows the last emulated host")
    if a.slow_host is not None and not 0.01 <= a.slow_host <= (os.cpu_count() or 1):
        ap.error(f"--slow-host {a.slow_host:g}: cores from 0.01 to this machine's {os.cpu_count()}")
    script_sampling = a.framework == "torch" and a.sampling in ("epoch", "shard")
    if a.split == "fixed" and not a.fault and not script_sampling:
        ap.error(
            "--split fixed (the default) takes batches as a PyTorch script does, from a "
            "DistributedSampler (--sampling epoch or shard); with --framework tensorflow or "
            "--sampling whole, ask for --split bound (an upper bound for a script)"
        )
    if "allreduce-balanced" in systems and a.split != "fixed":
        ap.error("--systems: allreduce-balanced takes batches as a script does: --split fixed")
    if a.fault and "allreduce-balanced" in systems:
        ap.error("--fault: allreduce-balanced sizes batches by pass; the elastic script does not")
    if a.fault and (a.split != "fixed" or a.slow_host is not None):
        ap.error(
            "--fault: every rank takes the same steps, as a script does: no --split bound, "
            "no --slow-host"
        )
    if a.fault:
        try:
            killed, kill_step = faults.parse_kill(a.fault)
        except ValueError as e:
            ap.error(f"--fault: {e}")
        if a.framework != "torch" or a.workload != "mnist1d":
            ap.error("--fault: PyTorch on mnist1d only (no --framework, no --workload)")
        if len(ranks) > 1 or len(scenarios) > 1:
            ap.error("--fault: one rank count and one scenario per run")
        if kill_step >= pick("steps"):
            ap.error(f"--fault {a.fault}: the kill comes after the run's {pick('steps')} steps")
        if any(killed >= n for n in ranks):
            ap.error(f"--fault {a.fault}: needs more than {killed + 1} ranks")
        if hosts is None and any(n % 2 for n in ranks):
            ap.error(f"--fault {a.fault}: two hosts of this machine need an even number of ranks")
        if hosts == 1:
            ap.error("--fault --hosts: the fault drops a whole host; one leaves no survivor")
        if a.commit_every < 1:
            ap.error("--commit-every: must be at least 1")
        if a.readmit_after is not None and not 1 <= a.readmit_after <= faults.MAX_READMIT_S:
            ap.error(f"--readmit-after: seconds from 1 to {faults.MAX_READMIT_S} (Horovod's range)")
        systems = [faults.REFERENCE, *(s for s in systems if s != faults.REFERENCE)]
    elif faults.REFERENCE in systems:
        ap.error(f"--systems: {faults.REFERENCE} is --fault's reference")
    elif a.readmit_after is not None:
        ap.error("--readmit-after needs --fault: it brings back the host the fault dropped")
    plan = Plan(
        ranks=ranks,
        scenarios=scenarios,
        systems=systems,
        seeds=pick("seeds"),
        first_seed=a.first_seed,
        steps=pick("steps"),
        compute_ms=pick("compute_ms"),
        params=pick("params"),
        batch=WORKLOADS[a.workload].batch if a.batch is None else a.batch,
        lr=WORKLOADS[a.workload].lr if a.lr is None else a.lr,
        framework=a.framework,
        sampling=a.sampling,
        target=WORKLOADS[a.workload].target if a.target is None else a.target,
        timeout=a.timeout,
        hosts=hosts,
        slots=slots,
        link=a.link,
        fault=a.fault,
        commit_every=a.commit_every,
        readmit_after=a.readmit_after,
        workload=a.workload,
        split=a.split,
        slow_host=a.slow_host,
        compute_by=a.compute_by,
    )
    out = a.out or Path("bench-results") / time.strftime("%Y%m%d-%H%M%S")
    return plan, out
