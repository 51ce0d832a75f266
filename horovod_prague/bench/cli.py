"""``prague-bench``: All-Reduce and Prague's designs side by side, under injected slowdowns.

Every job is ``horovodrun -np N --gloo`` on this machine running the same plain Horovod
script (``horovod_prague.bench.worker``), with or without ``--prague``. Jobs run one at a
time, and the systems take turns within each (ranks, scenario, seed) block, in an order that
rotates from block to block, so machine noise hits all alike. Ratios are taken within a
block, then averaged over seeds.

    prague-bench --quick            # about 4 minutes: n = 8, random slowdowns, 3 systems
    prague-bench                    # the full matrix (docs/benchmarks.md gives its duration)
    python -m horovod_prague.bench --ranks 8 --scenarios persistent --systems allreduce,prague
    prague-bench --hosts 2x4 --link 1gbit --scenarios random   # across emulated hosts (root)
    prague-bench --fault 5@100 --systems allreduce,allreduce-poll,prague   # elastic, a rank lost
    prague-bench --fault 5@100 --readmit-after 40    # ... and its host back 40 s later

With ``--hosts HxS`` every job runs on H emulated hosts of S ranks each
(``horovod_prague.bench.hosts``: network namespaces with sshd, launched through ssh as on a
cluster), their links limited to ``--link`` in each direction. With ``--fault R@K`` every
system runs under Horovod elastic and rank R dies at its step K (``bench.faults``); with
``--readmit-after S`` its host comes back S seconds later.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..common.config import PragueConfig
from ..runner import flag
from . import compute, faults
from .datasets import cached_path, load
from .report import BASELINES, summarize, write_outputs
from .workload import FRAMEWORKS, SAMPLING, SCENARIOS, WORKLOADS, schedule

SPLITS = ("bound", "fixed")
"""How a Prague job's steps are shared among its ranks (``prague-bench --split``)."""

BINDIR = Path(sys.executable).parent
"""Where this Python's ``horovodrun`` is: every job runs it."""

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


class BenchError(RuntimeError):
    """A benchmark job failed or outlived its timeout."""


@dataclasses.dataclass(frozen=True)
class Plan:
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
    split: str = "bound"
    slow_host: float | None = None
    compute_by: str = "sleep"
    cpu_units_per_ms: float | None = None
    """With ``compute_by="cpu"``: the work per millisecond, measured at the start of the run."""


def parse_args(argv: list[str] | None) -> tuple[Plan, Path]:
    ap = argparse.ArgumentParser(prog="prague-bench", description=__doc__.split("\n")[0])
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
        default="bound",
        help="how a Prague job's steps are shared: bound, each rank is given in advance the "
        "steps it can take by the time all stop together, from the delays to come (no script "
        "has this: an upper bound); fixed, every rank takes --steps batches from a DataLoader "
        "over a DistributedSampler, as a plain script (PyTorch, --sampling epoch or shard), "
        "which own_pace re-deals",
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
    if a.split == "fixed" and (a.framework != "torch" or a.sampling not in ("epoch", "shard")):
        ap.error("--split fixed: PyTorch, with --sampling epoch or shard (a DistributedSampler)")
    if "allreduce-balanced" in systems and a.split != "fixed":
        ap.error("--systems: allreduce-balanced takes batches as a script does: --split fixed")
    if a.fault and (a.split != "bound" or a.slow_host is not None):
        ap.error("--fault runs with --split bound and no --slow-host")
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


def job_order(plan: Plan) -> list[dict[str, Any]]:
    """Every job, blocks of all systems in a rotating order."""
    jobs = []
    block = 0
    for seed in range(plan.first_seed, plan.first_seed + plan.seeds):
        for ranks in plan.ranks:
            for scenario in plan.scenarios:
                shift = block % len(plan.systems)
                order = plan.systems[shift:] + plan.systems[:shift]
                block += 1
                for system in order:
                    jobs.append(
                        {"ranks": ranks, "scenario": scenario, "seed": seed, "system": system}
                    )
    return jobs


def run_job(
    job: dict[str, Any],
    plan: Plan,
    data: Path,
    workdir: Path,
    logs: Path,
    hosts: Any = None,
) -> dict[str, Any]:
    """Run one job, on ``hosts`` (emulated, ``hosts.Hosts``) if given; BenchError, with its
    whole output saved under ``logs``, if it fails."""
    stem = f"{job['system']}-{job['ranks']}-{job['scenario']}-{job['seed']}".replace("/", "+")
    out = workdir / f"{stem}.json"
    n = job["ranks"]
    command = job_command(job, plan, data, out, hosts)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOROVOD_PRAGUE_")}
    env.update(OMP_NUM_THREADS="1", PATH=f"{BINDIR}{os.pathsep}{env.get('PATH', '')}")
    started = time.perf_counter()
    proc = subprocess.Popen(
        command if hosts is None else hosts.run_command(command),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,  # so a job that outlives its timeout goes with all its ranks
    )
    try:
        output, _ = proc.communicate(timeout=plan.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        log = _save_log(logs, stem, command, output)
        raise BenchError(f"job {job} took over {plan.timeout:g} s (output: {log})") from None
    if proc.returncode != 0 or not out.exists():
        log = _save_log(logs, stem, command, output)
        raise BenchError(
            f"job {job} failed (exit {proc.returncode}); its output: {log}\n{output[-3000:]}"
        )
    result = json.loads(out.read_text())
    killed = Path(f"{out}.killed")
    if killed.exists():  # a fault job: its log shows how each rank met the fault
        result["killed_at"] = json.loads(killed.read_text())
        result["log"] = str(_save_log(logs.parent / "logs", stem, command, output))
    result["job_seconds"] = time.perf_counter() - started
    if not plan.fault:  # a fault run's bound is its table's (``faults.bounds_by_seed``)
        result["bound"] = schedule(job["scenario"], n, plan.steps, job["seed"]).bound
    return {**job, **result}


def job_command(
    job: dict[str, Any], plan: Plan, data: Path, out: Path, hosts: Any = None
) -> list[str]:
    """The ``horovodrun`` command line of one job."""
    n = job["ranks"]
    flags = system_flags(job["system"])[1]
    common = ["--workload", plan.workload, "--scenario", job["scenario"]]
    common += ["--steps", str(plan.steps)]
    common += ["--compute-ms", str(plan.compute_ms), "--params", str(plan.params)]
    common += ["--batch", str(plan.batch), "--lr", str(plan.lr), "--seed", str(job["seed"])]
    common += ["--data", str(data), "--sampling", plan.sampling, "--out", str(out)]
    if plan.cpu_units_per_ms is not None:
        common += ["--cpu-units-per-ms", f"{plan.cpu_units_per_ms:.3f}"]
    if job["system"] in ("allreduce-poll", "allreduce-balanced"):
        common.append("--poll-wait")
    if plan.fault and job["system"] != faults.REFERENCE:
        spec = faults.hosts(n) if hosts is None else hosts.host_spec(plan.slots)
        command = [str(BINDIR / "horovodrun"), "-np", str(n), "--min-np", str(n // 2)]
        command += ["-H", spec, "--gloo", *flags]
        if plan.readmit_after is not None:
            command += ["--blacklist-cooldown-range", *[str(plan.readmit_after)] * 2]
        command += [sys.executable, "-m", "horovod_prague.bench.elastic_worker", *common]
        return command + ["--kill", plan.fault, "--commit-every", str(plan.commit_every)]
    spec = f"localhost:{n}" if hosts is None else hosts.host_spec(plan.slots)
    command = [str(BINDIR / "horovodrun"), "-np", str(n), "-H", spec, "--gloo", *flags]
    command += [sys.executable, "-m", "horovod_prague.bench.worker", *common]
    evaluations = WORKLOADS[plan.workload].evaluations
    command += ["--eval-every", str(max(1, plan.steps // evaluations))]
    command += ["--framework", plan.framework]
    if plan.split == "fixed":  # batches as a plain script takes them
        command.append("--loader")
        if job["system"] == "allreduce-balanced":
            command.append("--balanced")
    elif flags:  # the bound: every rank given its share in advance; All-Reduce's move together
        command.append("--own-pace")
    return command


def _where(plan: Plan) -> str:
    if plan.hosts is None:
        return "one host"
    link = f"links of {plan.link} each way" if plan.link else "links not limited"
    slow = f", the last host on {plan.slow_host:g} cores" if plan.slow_host is not None else ""
    return f"{plan.hosts} emulated hosts x {plan.slots} ranks, {link}{slow}"


@contextlib.contextmanager
def _emulated_hosts(plan: Plan) -> Iterator[Any]:
    """The plan's emulated hosts, links shaped, for the whole run (None on this host alone)."""
    if plan.hosts is None:
        yield None
        return
    from .hosts import Hosts

    with Hosts.up(plan.hosts, slots=plan.slots) as hosts:
        hosts.shape(plan.link)
        if plan.slow_host is not None:
            hosts.limit_cpu(plan.hosts - 1, plan.slow_host)
        yield hosts


def _save_log(logs: Path, stem: str, command: list[str], output: str) -> Path:
    logs.mkdir(parents=True, exist_ok=True)
    path = logs / f"{stem}.log"
    path.write_text(" ".join(command) + "\n\n" + output)
    return path


def main(argv: list[str] | None = None) -> int:
    plan, out = parse_args(argv)
    if plan.compute_by == "cpu":  # measured once, so that every job does the same work
        plan = dataclasses.replace(plan, cpu_units_per_ms=compute.units_per_ms())
    out.mkdir(parents=True, exist_ok=True)
    data_path = cached_path(plan.workload)
    load(plan.workload, data_path)  # made once, before any rank needs it
    jobs = job_order(plan)
    labels = {s: system_flags(s) for s in plan.systems}
    print(
        f"prague-bench: {len(jobs)} {plan.framework} {plan.workload} jobs "
        f"({', '.join(plan.systems)}) x ranks {plan.ranks} x "
        f"{', '.join(plan.scenarios)} x {plan.seeds} seed(s), {plan.steps} steps of "
        f"{plan.compute_ms:g} ms, {plan.params:,} synthetic floats; "
        f"{_where(plan)}; results in {out}",
        flush=True,
    )
    results: list[dict[str, Any]] = []
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="prague-bench-") as tmp, _emulated_hosts(plan) as hosts:
        for i, job in enumerate(jobs, 1):
            try:
                result = run_job(job, plan, data_path, Path(tmp), out / "failed", hosts)
            except BenchError as e:
                print(f"prague-bench: {e}", file=sys.stderr)
                if plan.fault:  # a fault not survived is a result
                    results.append({**job, "failed": str(e)[:2000]})
                    continue
                if results:
                    write_outputs(
                        out,
                        dataclasses.asdict(plan),
                        results,
                        summarize(results, plan.target),
                        labels,
                    )
                return 1
            results.append(result)
            elapsed = time.perf_counter() - began
            print(
                f"[{i}/{len(jobs)} {elapsed:5.0f}s] n={job['ranks']} {job['scenario']:<10} "
                f"seed {job['seed']} {job['system']:<9} wall {result['wall']:6.1f} s  "
                f"accuracy {result['final_accuracy']:.3f}",
                flush=True,
            )
    if plan.fault:
        return _write_fault_outputs(out, plan, results, labels)
    summary = summarize(results, plan.target)
    write_outputs(out, dataclasses.asdict(plan), results, summary, labels)
    return 0


def _write_fault_outputs(
    out: Path, plan: Plan, results: list[dict[str, Any]], labels: dict[str, tuple[str, list]]
) -> int:
    rows = faults.summarize(results)
    table = faults.markdown(rows, {s: label for s, (label, _) in labels.items()})
    bounds = faults.bounds_by_seed(
        plan.scenarios[0],
        plan.ranks[0],
        plan.steps,
        range(plan.first_seed, plan.first_seed + plan.seeds),
        faults.parse_kill(plan.fault),
        plan.commit_every,
        host_size=plan.slots,
    )
    table += "\n\nThe script's bound (``faults.commit_window_bound``), seed by seed: " + ", ".join(
        f"{b:.2f}x" for b in bounds
    )
    (out / "table.md").write_text(table + "\n")
    (out / "results.json").write_text(
        json.dumps({"plan": dataclasses.asdict(plan), "summary": rows, "runs": results}, indent=1)
    )
    print(table)
    return 0 if all(r["survived"] == r["seeds"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
