"""Where an elastic job's time goes after a lost worker, stock Horovod against ``--prague``.

    .venv/bin/python benchmarks/reset_phases.py [--seeds 1 2 3] [--steps 160] [--keep DIR]
                                                [--hosts HxS]

Each seed runs one job of each system, one at a time, alternating: ``prague-bench``'s fault
job (``bench.elastic_worker``: 8 Gloo ranks on ``localhost:4,127.0.0.1:4``, ``--min-np 4``,
or with ``--hosts HxS`` on H emulated hosts of S ranks (root; ``bench.hosts``),
rank 5 dies at its step 100, a commit every 100 steps, random slowdown) with every phase of
the reset timed on each survivor (``workers/reset_phases.py``). Per phase, the median over
the seeds of the latest survivor's end, in seconds after the kill, and of the longest
survivor's time in it; then the reset's own time (``reset_seconds``), the kill to the next
step (``faults.recovery``) and the wall.
docs/results.md (*The extra second*) records runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from horovod_prague.bench.faults import hosts, recovery
from horovod_prague.bench.hosts import Hosts, parse_layout

WORKER = Path(__file__).parent / "workers" / "reset_phases.py"
BIN = Path(sys.executable).parent
PHASES = (
    "state restored (a collective failed)",
    "horovod shutdown",
    "horovod init",
    "prague's process sets",
    "horovod adding them (add_process_set[s])",
    "prague's start",
    "group generator connection",
    "state synced",
    "first step (its training and averaging)",
    "group generator's group for it",
    "prague's average in the first step",
)
RESTORED, STEP = PHASES[0], PHASES[-3]
IN_STEP = PHASES[-3:]
SYSTEMS = {"stock": [], "prague": ["--prague"]}


def job(
    flags: list[str], seed: int, steps: int, keep: Path | None, emulated: Hosts | None = None
) -> dict:
    """One fault job; its result, with per phase of the reset (a survivor's calls from the
    kill to the end of its first step) the latest end after the kill and the longest time a
    survivor spent in it (summed over its calls)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        command = [
            str(BIN / "horovodrun"), "-np", "8", "--min-np", "4",
            "-H", hosts(8) if emulated is None else emulated.host_spec(), "--gloo", *flags,
            sys.executable, str(WORKER), "--steps", str(steps), "--kill", "5@100",
            "--commit-every", "100", "--seed", str(seed), "--out", str(out),
        ]  # fmt: skip
        env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        if emulated is not None:
            command = emulated.run_command(command)
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
        if keep is not None:
            shutil.copytree(tmp, keep / f"seed{seed}{'-'.join(['', *flags])}", dirs_exist_ok=True)
        if done.returncode or not out.exists():
            raise RuntimeError(f"{flags}: exit {done.returncode}\n{done.stdout[-3000:]}")
        result = json.loads(out.read_text())
        killed_at = json.loads(Path(f"{out}.killed").read_text())
        result["killed_at"] = killed_at
        traces = [json.loads(t.read_text()) for t in Path(tmp).glob("r.json.phases.*")]
    result["phase_ends"], result["phase_spent"] = reset_phases(traces, killed_at)
    return result


Call = tuple[str, float, float]


def reset_phases(traces: list[list[Call]], killed_at: float) -> tuple[dict, dict]:
    """Per phase, the latest end after the kill and the longest time one survivor spent in
    it, from each survivor's calls (phase, start, end) between the kill and the end of its
    first step after it restored the state; a step the failure ended does not count.

    >>> survivor = [("state synced", 5.0, 6.0), (STEP, 9.0, 9.5), (RESTORED, 10.2, 10.3),
    ...             ("horovod init", 10.3, 10.8), (STEP, 11.0, 11.2), (STEP, 12.0, 12.1)]
    >>> ends, spent = reset_phases([survivor], killed_at=9.2)
    >>> [(phase.split()[0], ends[phase], spent[phase]) for phase in ends]
    [('state', 1.1, 0.1), ('horovod', 1.6, 0.5), ('first', 2.0, 0.2)]
    """
    ends: dict[str, float] = {}
    spent: dict[str, float] = {}
    for calls in traces:
        mine: dict[str, float] = defaultdict(float)
        restored = False
        for phase, start, end in sorted(calls, key=lambda c: c[1]):
            restored = restored or phase == RESTORED
            if start < killed_at or (phase in IN_STEP and not restored):
                continue  # before the kill, or a step that the failure ended
            mine[phase] += end - start
            ends[phase] = round(max(ends.get(phase, 0.0), end - killed_at), 6)
            if phase == STEP:  # this survivor's reset ends with its first step after it
                break
        for phase, seconds in mine.items():
            spent[phase] = round(max(spent.get(phase, 0.0), seconds), 6)
    return ends, spent


def reset_seconds(run: dict) -> float:
    """From the latest survivor's failure (its state restored) to the end of the latest sync:
    the reset's own work, without the time a survivor took to reach a failing collective
    (a slowed step) or the compute of its first step after it.

    >>> reset_seconds({"phase_ends": {RESTORED: 0.3, "state synced": 0.75}})
    0.45
    """
    ends = run["phase_ends"]
    return round(ends["state synced"] - ends[RESTORED], 6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=160)
    parser.add_argument("--keep", type=Path, help="copy each job's results and traces here")
    parser.add_argument("--hosts", help="HxS: 8 ranks on H emulated hosts of S ranks (root)")
    args = parser.parse_args()
    emulated = contextlib.nullcontext(None)
    if args.hosts:
        try:
            count, slots = parse_layout(args.hosts)
        except ValueError as e:
            parser.error(f"--hosts: {e}")
        if count * slots != 8 or count < 2:
            parser.error(f"--hosts {args.hosts}: 8 ranks on at least two hosts, such as 8x1")
        emulated = Hosts.up(count, slots=slots)
    with emulated as on_hosts:
        runs = run_seeds(args.seeds, args.steps, args.keep, on_hosts)
    report(runs)


def run_seeds(
    seeds: list[int], steps: int, keep: Path | None, emulated: Hosts | None
) -> dict[str, list[dict]]:
    """Each seed's job of each system, alternating."""
    runs: dict[str, list[dict]] = {name: [] for name in SYSTEMS}
    for seed in seeds:
        for name, flags in SYSTEMS.items():
            r = job(flags, seed, steps, keep, emulated)
            runs[name].append(r)
            print(
                f"seed {seed} {name}: kill to next step {recovery(r):.2f} s, wall "
                f"{r['wall']:.1f} s, one model {r['same_model_on_every_rank']}",
                flush=True,
            )
    return runs


def report(runs: dict[str, list[dict]]) -> None:
    """Per phase, the medians over the seeds; then the reset, the kill to next step, the wall."""

    def median(name: str, key: str, phase: str) -> str:
        values = [r[key][phase] for r in runs[name] if phase in r[key]]
        return f"{statistics.median(values):.3f}" if values else "-"

    print("\n| phase | stock: ends at (s) | stock: longest in it (s) | prague: ends at (s) "
          "| prague: longest in it (s) |")  # fmt: skip
    print("|---|---|---|---|---|")
    for phase in PHASES:
        cells = [median(n, k, phase) for n in SYSTEMS for k in ("phase_ends", "phase_spent")]
        print(f"| {phase} | {' | '.join(cells)} |")
    for label, value in (
        ("the reset: last survivor's failure to all synced", reset_seconds),
        ("kill to next step", recovery),
        ("wall", lambda r: r["wall"]),
    ):
        cells = [
            f"{statistics.median(value(r) for r in runs[n]):.3f} "
            f"({', '.join(f'{value(r):.2f}' for r in runs[n])})"
            for n in SYSTEMS
        ]
        print(f"| {label} | {cells[0]} | | {cells[1]} | |")


if __name__ == "__main__":
    main()
