"""``prague-bench``: All-Reduce and Prague's designs side by side, under injected slowdowns.

Every job is ``horovodrun -np N --gloo`` on this machine running the same plain Horovod
script (``horovod_prague.bench.worker``), with or without ``--prague``. Jobs run one at a
time, and the systems take turns within each (ranks, scenario, seed) block, in an order that
rotates from block to block, so machine noise hits all alike. Ratios are taken within a
block, then averaged over seeds.

    prague-bench --quick            # about 4 minutes: n = 8, random slowdowns, 3 systems
    prague-bench                    # the full matrix: every system, scenario and seed
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

from . import compute, faults
from .datasets import cached_path, load
from .plan import Plan, parse_args, system_flags
from .report import summarize, write_outputs
from .workload import WORKLOADS, schedule

BINDIR = Path(sys.executable).parent
"""Where this Python's ``horovodrun`` is: every job runs it."""


class BenchError(RuntimeError):
    """A benchmark job failed or outlived its timeout."""


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
    if plan.fault:  # the fault's undisturbed reference: the same steps as the elastic jobs
        pass
    elif plan.split == "fixed":  # batches as a plain script takes them
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
