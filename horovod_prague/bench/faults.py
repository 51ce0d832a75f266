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
from typing import Any

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
