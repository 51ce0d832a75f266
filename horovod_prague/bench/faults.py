"""``prague-bench --fault R@K``: the systems under Horovod elastic, one rank killed mid-run.

Every system runs ``bench.elastic_worker`` (a plain elastic PyTorch script) as
``horovodrun --gloo -np N --min-np N/2 -H localhost:N/2,127.0.0.1:N/2``: two hosts on this
machine, as Horovod's own elastic tests make them. Rank ``R`` of the first world dies at its
step ``K``; Horovod's elastic driver drops its host, and the survivors reset and train until
the samples of an undisturbed run. With ``--readmit-after S`` the driver takes the host back
S seconds later (its blacklist cool-down): new workers start there and join from the last
commit, as a replaced machine would. Beside them in each block, ``undisturbed`` is stock
All-Reduce with no fault and no elastic (``bench.worker``), the accuracy every system is
compared with.

Per system, over the seeds: every fault survived (the job ended, one model on every rank),
the speed-up over the faster stock elastic All-Reduce of the block, the seconds from the kill
to the survivors' next step (the latest survivor's), accuracy after the same samples
against ``undisturbed``, and the ranks of the last world (the first world's again when the
lost host came back in time).

    >>> runs = [
    ...     {"seed": 0, "system": "undisturbed", "wall": 50.0, "final_accuracy": 0.80},
    ...     {"seed": 0, "system": "allreduce", "wall": 90.0, "final_accuracy": 0.79,
    ...      "killed_at": 100.0, "worlds": [{"resumed": [130.0]}, {"resumed": [131.0]}],
    ...      "same_model_on_every_rank": True},
    ...     {"seed": 0, "system": "prague", "wall": 40.0, "final_accuracy": 0.81,
    ...      "killed_at": 10.0, "same_model_on_every_rank": True,
    ...      "worlds": [{"resumed": [25.0, 30.0]}, {"resumed": [22.0, 30.0]}, {"resumed": []}]},
    ... ]
    >>> [(r["system"], r["speedup"], r["recovery_s"], r["accuracy_delta"], r["last_world_size"])
    ...  for r in summarize(runs)]
    [('allreduce', 1.0, 31.0, -0.01, [2]), ('prague', 2.25, 15.0, 0.01, [3])]
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from .workload import schedule

REFERENCE = "undisturbed"
"""The block's All-Reduce run with no fault: the accuracy every system is compared with."""
STOCK = ("allreduce", "allreduce-poll")
"""Stock Horovod elastic All-Reduce, spinning and not: speed-ups are to the faster."""
MAX_READMIT_S = 3600
"""The longest blacklist cool-down ``horovodrun`` accepts (``--blacklist-cooldown-range``)."""


def parse_kill(spec: str) -> tuple[int, int]:
    """``R@K``: rank R of the first world dies at its step K.

    >>> parse_kill("5@100")
    (5, 100)
    """
    rank, at, step = spec.partition("@")
    if not (at and rank.isdigit() and step.isdigit()):
        raise ValueError(f"expected RANK@STEP such as 5@100, got {spec!r}")
    return int(rank), int(step)


def hosts(ranks: int) -> str:
    """Two hosts on this machine, half the ranks on each (Horovod's own elastic tests' trick).

    >>> hosts(8)
    'localhost:4,127.0.0.1:4'
    """
    return f"localhost:{ranks // 2},127.0.0.1:{ranks // 2}"


def recovery(run: dict[str, Any]) -> float | None:
    """Seconds from the kill to the latest survivor's first step after a reset.

    ``worlds`` holds, per survivor, when it first stepped in each world after the first
    (None for a world it reset again before stepping in):

    >>> recovery({"killed_at": 10.0, "worlds": [{"resumed": [None, 14.0]}, {"resumed": [12.0]}]})
    4.0
    """
    firsts = [next((t for t in w["resumed"] if t is not None), None) for w in run.get("worlds", [])]
    resumed = [t for t in firsts if t is not None]
    if "killed_at" not in run or not resumed:
        return None
    return max(resumed) - run["killed_at"]


def commit_window_bound(
    factors: list[list[float]],
    kill: tuple[int, int],
    steps: int,
    commit_every: int,
    host_size: int | None = None,
) -> float:
    """What the slowdowns alone allow ranks free between commits to gain over All-Reduce.

    The fault job's script makes every rank take ``commit_every`` steps and then commit, a
    global wait (Horovod's ``check_host_updates`` broadcasts), so a rank can run ahead of the
    others only within a window. Per window, All-Reduce waits for the slowest rank at every
    step, free ranks only for the slowest sum. The first world's ranks train until rank R's
    step K; the ``host_size`` ranks of its host are lost (Horovod's driver drops the whole
    host; by default half the ranks, two hosts); the others go on from the last commit
    until the samples of ``steps`` steps of every rank, each slowed as ``factors`` say for
    the rank it was at the start. Ignores communication and the reset itself.

    >>> slow = [[1.0] * 8, [1.0] * 8]
    >>> slow[1][0] = slow[0][1] = 3.0  # one slow step each, in one window of 2
    >>> commit_window_bound(slow, kill=(1, 2), steps=2, commit_every=2)  # 2x3 over 4: 1.5
    1.5
    >>> fast = [[1.0] * 4, [1.0] * 4, [1.0] * 4, [1.0] * 4]
    >>> commit_window_bound(fast, kill=(3, 2), steps=2, commit_every=1, host_size=1)
    1.0
    """
    ranks = len(factors)
    host_size = ranks // 2 if host_size is None else host_size
    if not (1 <= host_size < ranks and ranks % host_size == 0):
        raise ValueError(
            f"host_size: hosts of {host_size} ranks do not split {ranks} in two or more"
        )
    first = kill[0] // host_size * host_size
    lost_host = range(first, first + host_size)
    survivors = [r for r in range(ranks) if r not in lost_host]
    committed = kill[1] // commit_every * commit_every
    windows = [(list(range(ranks)), start) for start in range(0, committed, commit_every)]
    after = range(committed, committed + (steps - committed) * ranks // len(survivors))
    windows += [(survivors, start) for start in after[::commit_every]]
    lockstep = free = 0.0
    for members, start in windows:
        window = range(start, start + commit_every)
        lockstep += sum(max(factors[r][j] for r in members) for j in window)
        free += max(sum(factors[r][j] for j in window) for r in members)
    return lockstep / free


def bounds_by_seed(
    scenario: str,
    ranks: int,
    steps: int,
    seeds: Iterable[int],
    kill: tuple[int, int],
    commit_every: int,
    host_size: int | None = None,
) -> list[float]:
    """``commit_window_bound`` of each seed's slowdowns (``workload.schedule``).

    >>> [round(b, 2) for b in bounds_by_seed("random", 8, 250, [0], (5, 100), 100, host_size=1)]
    [2.08]
    """
    return [
        commit_window_bound(
            schedule(scenario, ranks, steps, seed).factors, kill, steps, commit_every, host_size
        )
        for seed in seeds
    ]


def summarize(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per system (the reference aside): its means over the blocks that ran it."""
    blocks: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in results:
        blocks[r["seed"]][r["system"]] = r
    cells: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for runs in blocks.values():
        reference = runs.get(REFERENCE)
        if reference is not None and "failed" in reference:
            reference = None
        stock = [runs[s] for s in STOCK if s in runs and "failed" not in runs[s]]
        fastest = min((r["wall"] for r in stock), default=None)
        for system, r in runs.items():
            if system == REFERENCE:
                continue
            failed = "failed" in r
            cells[system].append(
                {
                    "survived": not failed and r.get("same_model_on_every_rank", False),
                    "speedup": None if failed or fastest is None else fastest / r["wall"],
                    "recovery_s": None if failed else recovery(r),
                    "accuracy_delta": None
                    if failed or reference is None
                    else r["final_accuracy"] - reference["final_accuracy"],
                    "wall": None if failed else r["wall"],
                    "last_world_size": None if failed else len(r.get("worlds", [])) or None,
                }
            )
    rows = []
    for system, seeds in cells.items():

        def mean(key: str, seeds: list[dict[str, Any]] = seeds) -> float | None:
            values = [s[key] for s in seeds if s[key] is not None]
            return round(statistics.mean(values), 3) if values else None

        rows.append(
            {
                "system": system,
                "seeds": len(seeds),
                "survived": sum(s["survived"] for s in seeds),
                "wall": mean("wall"),
                "speedup": mean("speedup"),
                "recovery_s": mean("recovery_s"),
                "accuracy_delta": mean("accuracy_delta"),
                "last_world_size": [
                    s["last_world_size"] for s in seeds if s["last_world_size"] is not None
                ],
            }
        )
    return rows


def markdown(rows: list[dict[str, Any]], labels: dict[str, str]) -> str:
    """The rows as a Markdown table."""

    def show(value: float | None, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    lines = [
        "| system | faults survived | wall (s) | speed-up over stock elastic | kill to next "
        "step (s) | accuracy vs undisturbed (points) | ranks at the end |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        delta = None if r["accuracy_delta"] is None else 100 * r["accuracy_delta"]
        lines.append(
            f"| {labels.get(r['system'], r['system'])} | {r['survived']} of {r['seeds']} "
            f"| {show(r['wall'], '.1f')} | {show(r['speedup'], '.2f')}x "
            f"| {show(r['recovery_s'], '.1f')} | {show(delta, '+.2f')} "
            f"| {', '.join(map(str, r['last_world_size'])) or '-'} |"
        )
    return "\n".join(lines)
