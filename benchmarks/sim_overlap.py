"""A discrete-event model of the real Group Generator with overlapped P-Reduce.

A model, not a measurement. Like a generic grouping simulator, but the groups come from
this project's own ``GroupGenerator`` and strategies (pure Python), so the threshold rule and
the backlog guard act as they do in a job. Each rank computes a step (1 unit, or its
scenario's factor); with fewer than ``in_flight`` averages in flight it asks for a group,
waits for an average in flight that shares a member with it, submits the group's average
and goes on; otherwise its step takes no group; the ``max(staleness, in_flight)``-th step
after an average started waits for it (``horovod_prague.common.overlap``). ``staleness=0``
blocks on every average. An average completes ``comm`` units after its last member submitted it.

It also models how well the ranks agree (``ScalarModels``): every rank holds a number, each
step adds to it noise drawn from N(0, 1) (its gradient), and each average adds ``scale * (mean
of the members' snapshots - its own snapshot)``, where ``scale`` is ``1 / in_flight`` for an
average that a member started while another of its own was in flight (``overlap.Overlap``; 1
with ``--undamped``). ``spread`` is the variance across ranks, averaged over the run: lower
means better mixed models. ``run`` takes any other ``Models``: ``sim_training.py`` trains the
benchmark's real CNN on every emulated rank.

    .venv/bin/python benchmarks/sim_overlap.py --ranks 8 --scenario random

Across hosts, ``--allreduce-comm`` sets All-Reduce's time apart from a group average's
(``--comm``), and each row also gives the Group Generator's load: its requests per second
with steps of ``--step-ms`` (docs/benchmarks.md, *Projected to 64 and 256 ranks*).
"""

from __future__ import annotations

import argparse
import collections
import heapq
import itertools
import random
import statistics
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from horovod_prague.bench.workload import SCENARIOS, schedule
from horovod_prague.common.config import PragueConfig
from horovod_prague.common.group_generator import GroupGenerator
from horovod_prague.common.strategies import make_strategy
from horovod_prague.common.topology import Topology


class Outcome(NamedTuple):
    time: float
    """Until every rank finished."""
    alone: float
    """Share of steps that took no group."""
    waited: float
    """Share of the ranks' time spent waiting for averages in flight."""
    spread: float
    """The ranks' variance, averaged over the run past its first fifth."""
    requests: int
    """Requests to the Group Generator."""


class Models(Protocol):
    """The ranks' models as ``run`` drives them: a step, a snapshot sent to an average, and
    the correction an average applies."""

    def step(self, rank: int) -> None: ...

    def snapshot(self, rank: int) -> Any:
        """What ``rank`` sends to an average it starts now."""

    def weight(self, rank: int) -> float:
        """Its weight in that average (1 for equal weights)."""

    def apply(self, rank: int, members: list[tuple[Any, float]], own: Any, scale: float) -> None:
        """Add ``scale * (weighted mean of members' snapshots - own snapshot)`` to ``rank``."""

    def spread(self) -> float:
        """How far apart the ranks' models were over the run (lower: better mixed)."""


class ScalarModels:
    """Each rank a number; a step adds N(0, 1) noise; equal weights."""

    def __init__(self, ranks: int, seed: int) -> None:
        self.noise = random.Random(seed)
        self.value = [0.0] * ranks
        self.variances: list[float] = []

    def step(self, rank: int) -> None:
        self.value[rank] += self.noise.gauss(0.0, 1.0)
        if rank == 0:
            self.variances.append(statistics.pvariance(self.value))

    def snapshot(self, rank: int) -> float:
        return self.value[rank]

    def weight(self, rank: int) -> float:
        return 1.0

    def apply(self, rank: int, members: list[tuple[Any, float]], own: Any, scale: float) -> None:
        mean = sum(s * w for s, w in members) / sum(w for _, w in members)
        self.value[rank] += scale * (mean - own)

    def spread(self) -> float:
        return statistics.mean(self.variances[len(self.variances) // 5 :])  # past the start


def allreduce_time(factors: list[list[float]], steps: int, comm: float) -> float:
    """All-Reduce's time for ``steps`` steps: each as slow as its slowest rank, plus ``comm``."""
    return sum(max(row[j] for row in factors) + comm for j in range(steps))


def accepts(strategy: str, group_size: int, topology: Topology) -> bool:
    """Whether ``strategy`` can run groups of ``group_size`` on ``topology``."""
    try:
        make_strategy(PragueConfig(strategy=strategy, group_size=group_size), topology)
    except ValueError:
        return False
    return True


def run(
    factors: list[list[float]],
    steps: list[int],
    strategy: str,
    staleness: int,
    comm: float,
    seed: int,
    in_flight: int = 1,
    damped: bool = True,
    nodes: int | None = None,
    local_comm: float | None = None,
    group_size: int = 2,
    models: Models | None = None,
) -> Outcome:
    n = len(factors)
    config = PragueConfig(
        strategy=strategy, seed=seed, staleness=str(staleness), group_size=group_size
    )
    gg = GroupGenerator(make_strategy(config, Topology(n, nodes or n)))
    models = ScalarModels(n, seed) if models is None else models
    sent: dict[tuple, dict[int, tuple[Any, float, bool]]] = collections.defaultdict(dict)
    submitted: list[collections.Counter] = [collections.Counter() for _ in range(n)]
    applied: collections.Counter = collections.Counter()
    done_at: dict[tuple, float] = {}
    flights: list[list[tuple[tuple, int]]] = [[] for _ in range(n)]  # (occurrence, step started)
    waiting: dict[tuple, list[tuple[int, Callable[[int, float], None]]]] = collections.defaultdict(
        list
    )
    step = [0] * n
    finished = [0.0] * n
    alone = 0
    waited = 0.0
    events = [(factors[r][0], r) for r in range(n)]
    heapq.heapify(events)

    def apply(r: int, key: tuple) -> None:
        members = sent[key]
        overlapped = any(o for _, _, o in members.values())
        scale = 1.0 / in_flight if damped and overlapped else 1.0
        models.apply(r, [(s, w) for s, w, _ in members.values()], members[r][0], scale)
        applied[key] += 1
        if applied[key] == len(members):  # every member has it: drop the snapshots
            del sent[key]

    def compute_next(r: int, now: float) -> None:
        models.step(r)
        step[r] += 1
        if step[r] < steps[r]:
            heapq.heappush(events, (now + factors[r][step[r]], r))
            return
        finished[r] = now
        for group in gg.finish(r).groups:  # submitted; their members will reach them
            if len(group) < n:
                submit(r, group, now)

    def submit(r: int, group: tuple, now: float) -> tuple:
        key = (group, submitted[r][group])
        submitted[r][group] += 1
        sent[key][r] = (models.snapshot(r), models.weight(r), bool(flights[r]))
        if len(sent[key]) == len(group):
            local = nodes and len({m // nodes for m in group}) == 1
            done_at[key] = now + (local_comm if local and local_comm is not None else comm)
            for x, then in waiting.pop(key, []):
                then(x, done_at[key])
        return key

    def wait_for(r: int, key: tuple, now: float, then: Callable[[int, float], None]) -> None:
        def resume(x: int, t: float) -> None:
            nonlocal waited
            waited += t - now
            flights[x] = [f for f in flights[x] if f[0] != key]
            apply(x, key)
            then(x, t)

        if key in done_at:
            resume(r, max(now, done_at[key]))
        else:
            waiting[key].append((r, resume))

    def collect(r: int, now: float) -> None:
        for key, started in list(flights[r]):
            if done_at.get(key, float("inf")) <= now:
                flights[r].remove((key, started))
                apply(r, key)

    def decide(r: int, now: float) -> None:
        nonlocal alone
        collect(r, now)
        if len(flights[r]) < in_flight:
            start(r, gg.next_group(r), now)
        elif step[r] - flights[r][0][1] >= staleness:
            wait_for(r, flights[r][0][0], now, decide)
        else:
            alone += 1  # as many averages as allowed are still in flight: no group
            compute_next(r, now)

    def start(r: int, group: tuple, now: float) -> None:
        nonlocal alone
        if len(group) < 2:
            alone += 1
            compute_next(r, now)
            return
        collect(r, now)
        sharing = [f[0] for f in flights[r] if (set(group) - {r}) & set(f[0][0])]
        if sharing:
            wait_for(r, sharing[0], now, lambda x, t: start(x, group, t))
            return
        key = submit(r, group, now)
        flights[r].append((key, step[r]))
        if staleness == 0:
            wait_for(r, key, now, compute_next)
        else:
            compute_next(r, now)

    while events:
        now, r = heapq.heappop(events)
        decide(r, now)
    if any(waiting.values()):
        raise RuntimeError(f"deadlock: {dict(waiting)}")
    end = max(finished)
    return Outcome(end, alone / sum(steps), waited / (n * end), models.spread(), sum(gg.counts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--nodes", type=int, help="ranks per node (default: all on one node)")
    ap.add_argument("--scenario", default="random", choices=list(SCENARIOS))
    ap.add_argument("--strategies", default="smart,random")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--comm", type=float, default=0.3, help="an average's time, in steps")
    ap.add_argument(
        "--local-comm", type=float, help="a group average within one node (default: --comm)"
    )
    ap.add_argument(
        "--allreduce-comm", type=float, help="All-Reduce's time, in steps (default: --comm)"
    )
    ap.add_argument(
        "--designs",
        default="0:1,1:1,2:1,4:1,1:2,1:3,2:2",
        help="staleness:in_flight pairs, comma-separated (1:2 is the default design)",
    )
    ap.add_argument(
        "--group-sizes",
        default="2",
        help="ranks per group, comma-separated (a strategy skips sizes it refuses: adpsgd "
        "runs pairs only)",
    )
    ap.add_argument("--step-ms", type=float, default=100.0, help="a step, for requests/s")
    ap.add_argument(
        "--undamped", action="store_true", help="apply overlapped averages whole (not shipped)"
    )
    a = ap.parse_args()
    designs = [tuple(map(int, d.split(":"))) for d in a.designs.split(",")]
    allreduce_comm = a.comm if a.allreduce_comm is None else a.allreduce_comm
    rows = collections.defaultdict(list)
    for seed in range(a.seeds):
        plan = schedule(a.scenario, a.ranks, a.steps, seed)
        f = plan.factors
        allreduce = allreduce_time(f, a.steps, allreduce_comm)
        rows["bound"].append((plan.bound, 0.0, 0.0, float("nan"), float("nan")))
        for strategy, g in itertools.product(
            a.strategies.split(","), map(int, a.group_sizes.split(","))
        ):
            if not accepts(strategy, g, Topology(a.ranks, a.nodes or a.ranks)):
                continue
            for s, k in designs:
                out = run(
                    f,
                    plan.own_pace_steps,
                    strategy,
                    s,
                    a.comm,
                    seed,
                    k,
                    not a.undamped,
                    a.nodes,
                    a.local_comm,
                    g,
                )
                name = f"{strategy} s={s}" + (f" in_flight={k}" if k > 1 else "")
                name += f" g={g}" if g != 2 else ""
                per_s = out.requests / (out.time * a.step_ms / 1e3)
                rows[name].append((allreduce / out.time, out.alone, out.waited, out.spread, per_s))
    for name, vals in rows.items():
        ratio, alone, waited, spread, per_s = (
            statistics.mean(v[i] for v in vals) for i in range(5)
        )
        print(
            f"n={a.ranks} {a.scenario:<10} {name:<22} {ratio:5.2f}x  alone {alone:4.0%}"
            f"  waiting {waited:4.0%}  spread {spread:6.2f}  GG {per_s:6.0f} req/s"
        )


if __name__ == "__main__":
    main()
