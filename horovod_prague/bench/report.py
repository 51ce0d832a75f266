"""``prague-bench``'s figures: ratios to All-Reduce per block, a table, JSON and plots.

A *cell* is (ranks, scenario, system); a *block* is one seed of (ranks, scenario), in which
every system ran once, back to back. Each ratio is taken within a block, then averaged.

    >>> runs = [
    ...     {"ranks": 4, "scenario": "random", "seed": 0, "system": "allreduce", "wall": 10.0,
    ...      "bound": 1.8, "final_accuracy": 0.90, "curve": [[5.0, 0, 0.86], [10.0, 0, 0.9]]},
    ...     {"ranks": 4, "scenario": "random", "seed": 0, "system": "prague", "wall": 6.0,
    ...      "bound": 1.8, "final_accuracy": 0.91, "curve": [[2.0, 0, 0.88], [6.0, 0, 0.91]]},
    ... ]
    >>> row = summarize(runs, target=0.85)[1]
    >>> row["system"], row["throughput"], row["to_target"], round(row["accuracy_delta"], 3)
    ('prague', 1.667, 2.5, 0.01)
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any


def time_to(curve: list[list[float]], target: float) -> float | None:
    """The first time on ``curve`` ([time, samples, accuracy] points) at ``target`` or above."""
    return next((t for t, _, acc in curve if acc >= target), None)


def _rank_stats(run: dict[str, Any]) -> list[dict[str, int]]:
    """Each Prague rank's ``exchange_stats`` in a job (none without Prague)."""
    return [s for s in run.get("exchange_stats") or [] if s]


def alone_share(run: dict[str, Any]) -> float | None:
    """The share of a job's steps that averaged with nobody (None without Prague)."""
    stats = _rank_stats(run)
    steps = sum(s["steps"] for s in stats)
    return sum(s["alone"] for s in stats) / steps if steps else None


def time_shares(run: dict[str, Any]) -> tuple[float, float] | None:
    """The shares of the ranks' wall time spent in Prague's ``exchange``, and waiting for an
    average in flight (part of the exchange); both of wall time. None without Prague, or from
    runs that did not time them."""
    stats = _rank_stats(run)
    if not stats or any("exchange_ms" not in s for s in stats):
        return None
    total_ms = 1e3 * run["wall"] * len(stats)
    return (
        sum(s["exchange_ms"] for s in stats) / total_ms,
        sum(s["waited_ms"] for s in stats) / total_ms,
    )


BASELINES = ("allreduce", "allreduce-poll")
"""All-Reduce as Horovod ships it, and without its spinning wait: every ratio is taken to the
faster of those that ran in the block."""


def baseline(runs: dict[str, dict[str, Any]], framework: str = "torch") -> dict[str, Any] | None:
    """The block's All-Reduce run to compare with: the faster of ``BASELINES`` that ran.

    >>> baseline({"allreduce": {"wall": 9.0}, "allreduce-poll": {"wall": 8.0}})
    {'wall': 8.0}
    """
    suffix = "" if framework == "torch" else f" ({framework})"
    ran = [runs[b + suffix] for b in BASELINES if b + suffix in runs]
    return min(ran, key=lambda r: r["wall"]) if ran else None


def summarize(results: list[dict[str, Any]], target: float) -> list[dict[str, Any]]:
    """One row per cell: mean ratios to All-Reduce (``baseline``) over the cell's blocks."""
    blocks: dict[tuple[int, str, int, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    for r in results:
        framework = r.get("framework", "torch")
        blocks[(r["ranks"], r["scenario"], r["seed"], framework)][r["system"]] = r
    cells: dict[tuple[int, str, str], list[dict[str, Any]]] = defaultdict(list)
    for (ranks, scenario, _, framework), by_system in blocks.items():
        # Each framework's systems are compared with its own All-Reduce.
        runs = {
            (s if framework == "torch" else f"{s} ({framework})"): r for s, r in by_system.items()
        }
        base = baseline(runs, framework)
        if base is None:
            continue
        base_target = time_to(base["curve"], target)
        for system, r in runs.items():
            mine = time_to(r["curve"], target)
            cells[(ranks, scenario, system)].append(
                {
                    "throughput": base["wall"] / r["wall"],
                    "bound": r["bound"],
                    "to_target": None
                    if mine is None or base_target is None
                    else base_target / mine,
                    "accuracy": r["final_accuracy"],
                    "accuracy_delta": r["final_accuracy"] - base["final_accuracy"],
                    "loss": r.get("final_loss"),
                    "loss_delta": None
                    if "final_loss" not in r or "final_loss" not in base
                    else r["final_loss"] - base["final_loss"],
                    "wall": r["wall"],
                    "same_model": r.get("same_model_on_every_rank", False),
                    "alone": alone_share(r),
                    "shares": time_shares(r),
                }
            )
    rows = []
    for (ranks, scenario, system), seeds in sorted(cells.items(), key=_order):
        to_target = [s["to_target"] for s in seeds]
        alone = [s["alone"] for s in seeds]
        shares = [s["shares"] for s in seeds]
        losses = [s["loss"] for s in seeds]
        throughput = statistics.mean(s["throughput"] for s in seeds)
        bound = statistics.mean(s["bound"] for s in seeds)
        rows.append(
            {
                "ranks": ranks,
                "scenario": scenario,
                "system": system,
                "seeds": len(seeds),
                "wall": round(statistics.mean(s["wall"] for s in seeds), 2),
                "throughput": round(throughput, 3),
                "bound": round(bound, 3),
                "of_bound": round(throughput / bound, 3),
                "to_target": None if None in to_target else round(statistics.mean(to_target), 3),
                "accuracy": round(statistics.mean(s["accuracy"] for s in seeds), 4),
                "accuracy_delta": statistics.mean(s["accuracy_delta"] for s in seeds),
                "loss": None if None in losses else round(statistics.mean(losses), 4),
                "loss_delta": None
                if None in losses
                else statistics.mean(s["loss_delta"] for s in seeds),
                "same_model": all(s["same_model"] for s in seeds),
                "alone": None if None in alone else round(statistics.mean(alone), 3),
                "exchange": None
                if None in shares
                else round(statistics.mean(e for e, _ in shares), 3),
                "waiting": None
                if None in shares
                else round(statistics.mean(w for _, w in shares), 3),
            }
        )
    return rows


def _order(item: tuple[tuple[int, str, str], Any]) -> tuple[int, str, int, str]:
    (ranks, scenario, system), _ = item
    return (ranks, scenario, 0 if system == "allreduce" else 1, system)


def table(rows: list[dict[str, Any]], target: float) -> str:
    width = max([10, *(len(r["system"]) for r in rows)])
    head = (
        f"{'n':>2} {'scenario':<10} {'system':<{width}} {'seeds':>5} {'wall s':>7} "
        f"{'vs AR':>6} {'bound':>6} {'of bound':>8} {f'to {target:.0%}':>7} "
        f"{'accuracy':>8} {'vs AR pts':>9} {'loss':>6} {'vs AR':>7} {'alone':>5} "
        f"{'exch/wait':>9} {'same':>4}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        to_target = "-" if r["to_target"] is None else f"{r['to_target']:.2f}x"
        alone = "-" if r.get("alone") is None else f"{r['alone']:.0%}"
        lines.append(
            f"{r['ranks']:>2} {r['scenario']:<10} {r['system']:<{width}} {r['seeds']:>5} "
            f"{r['wall']:>7.1f} {r['throughput']:>5.2f}x {r['bound']:>5.2f}x "
            f"{r['of_bound']:>8.0%} {to_target:>7} {r['accuracy']:>8.3f} "
            f"{100 * r['accuracy_delta']:>+9.2f} {_loss(r, 6, 7)} {alone:>5} {_shares(r):>9} "
            f"{'yes' if r['same_model'] else 'NO':>4}"
        )
    return "\n".join(lines)


def markdown(rows: list[dict[str, Any]], target: float) -> str:
    """The table as Markdown, for docs/benchmarks.md."""
    lines = [
        f"| n | scenario | system | seeds | wall s | vs All-Reduce | bound | of bound "
        f"| to {target:.0%} | accuracy | vs AR (points) | test loss | vs AR (nats) | steps alone "
        "| in exchange / waiting | same model |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        to_target = "not reached" if r["to_target"] is None else f"{r['to_target']:.2f}x"
        alone = "-" if r.get("alone") is None else f"{r['alone']:.0%}"
        lines.append(
            f"| {r['ranks']} | {r['scenario']} | {r['system']} | {r['seeds']} | {r['wall']:.1f} "
            f"| {r['throughput']:.2f}x | {r['bound']:.2f}x | {r['of_bound']:.0%} | {to_target} "
            f"| {r['accuracy']:.3f} | {100 * r['accuracy_delta']:+.2f} "
            f"| {_loss(r, 0, 0).strip().replace(' ', ' | ')} | {alone} "
            f"| {_shares(r)} | {'yes' if r['same_model'] else 'NO'} |"
        )
    return "\n".join(lines)


def _loss(row: dict[str, Any], width: int, delta_width: int) -> str:
    """The row's test loss and its difference to All-Reduce's, in nats ('-' if not measured)."""
    if row.get("loss") is None:
        return f"{'-':>{width}} {'-':>{delta_width}}"
    return f"{row['loss']:>{width}.3f} {row['loss_delta']:>+{delta_width}.3f}"


def _shares(row: dict[str, Any]) -> str:
    if row.get("exchange") is None:
        return "-"
    return f"{row['exchange']:.0%}/{row['waiting']:.0%}"


def write_outputs(
    out: Path,
    plan: dict[str, Any],
    results: list[dict[str, Any]],
    rows: list[dict[str, Any]],
    systems: dict[str, tuple[str, list[str]]],
) -> None:
    """results.json, table.txt, table.md and the plots in ``out``; the table also on stdout."""
    text = table(rows, plan["target"])
    (out / "table.txt").write_text(text + "\n")
    (out / "table.md").write_text(markdown(rows, plan["target"]) + "\n")
    (out / "results.json").write_text(
        json.dumps({"plan": plan, "summary": rows, "runs": results}, indent=1)
    )
    print()
    print(text)
    print(
        "\nvs AR: throughput over All-Reduce (its wall time over the system's; the faster of "
        "stock and allreduce-poll where both ran); bound: the "
        "best ratio the injected delays allow; to X%: how much sooner rank 0's model reached "
        "that test accuracy; vs AR pts: final accuracy minus All-Reduce's after the same "
        "samples; loss, vs AR: the final model's test loss (nats) and its difference to "
        "All-Reduce's; alone: share of steps that averaged with nobody; exch/wait: shares of the "
        "ranks' wall time spent in Prague's exchange and, as part of it, waiting for an "
        "overlapped average in flight; same: every rank ended with the same model."
    )
    plots = plot(out, plan, results, rows, systems)
    print(f"\nresults: {out / 'results.json'}, {out / 'table.txt'}")
    for p in plots:
        print(f"plot: {p}")


def plot(
    out: Path,
    plan: dict[str, Any],
    results: list[dict[str, Any]],
    rows: list[dict[str, Any]],
    systems: dict[str, tuple[str, list[str]]],
) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    cells = sorted({(r["ranks"], r["scenario"]) for r in results})
    fig, axes = plt.subplots(1, len(cells), figsize=(5 * len(cells), 4), squeeze=False)
    for ax, (ranks, scenario) in zip(axes[0], cells, strict=True):
        for system in plan["systems"]:
            runs = [
                r
                for r in results
                if (r["ranks"], r["scenario"], r["system"]) == (ranks, scenario, system)
            ]
            if not runs:
                continue
            first = min(runs, key=lambda r: r["seed"])
            t = [p[0] for p in first["curve"]]
            acc = [p[2] for p in first["curve"]]
            ax.plot(t, acc, label=systems[system][0])
        ax.axhline(plan["target"], color="grey", lw=0.8, ls=":")
        ax.set_title(f"n = {ranks}, {scenario} slowdowns (seed 0)")
        ax.set_xlabel("wall time (s)")
        ax.set_ylabel("test accuracy, rank 0's model")
        ax.set_ylim(0, 1)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    path = out / "accuracy_vs_time.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    made.append(path)

    fig, axes = plt.subplots(1, len(cells), figsize=(5 * len(cells), 4), squeeze=False)
    for ax, (ranks, scenario) in zip(axes[0], cells, strict=True):
        mine = [r for r in rows if (r["ranks"], r["scenario"]) == (ranks, scenario)]
        names = [r["system"] for r in mine]
        ax.bar(names, [r["throughput"] for r in mine], color="tab:blue")
        if mine:
            ax.axhline(mine[0]["bound"], color="tab:red", ls="--", label="ideal bound")
        ax.set_title(f"n = {ranks}, {scenario}")
        ax.set_ylabel("throughput / All-Reduce")
        ax.tick_params(axis="x", rotation=45)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "throughput.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    made.append(path)
    return made


def main(argv: list[str] | None = None) -> None:
    """``python -m horovod_prague.bench.report DIR...``: one table from several runs' results."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("dirs", nargs="+", type=Path, help="prague-bench output folders")
    ap.add_argument("--target", type=float, help="accuracy to time (default: the first run's)")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args(argv)
    loaded = [json.loads((d / "results.json").read_text()) for d in a.dirs]
    target = a.target if a.target is not None else loaded[0]["plan"]["target"]
    rows = summarize([r for one in loaded for r in one["runs"]], target)
    print(markdown(rows, target) if a.markdown else table(rows, target))


if __name__ == "__main__":
    main()
