"""A discrete-event model of the real Group Generator with overlapped P-Reduce.

A model, not a measurement. Like a generic grouping simulator, but the groups come from
this project's own ``GroupGenerator`` and strategies (pure Python), so the threshold rule and
the backlog guard act as they do in a job. Each rank computes a step (1 unit, or its
scenario's factor); with nothing in flight it asks for a group, submits its average and goes
on; while its average is in flight its steps take no group, and the ``staleness``-th step
after it started waits for it (``horovod_prague.common.overlap``). ``staleness=0`` blocks on
every average. An average completes ``comm`` units after its last member submitted it.

    .venv/bin/python benchmarks/sim_overlap.py --ranks 8 --scenario random
"""

from __future__ import annotations

import argparse
import collections
import heapq
import statistics
from collections.abc import Callable

from horovod_prague.bench.workload import SCENARIOS, schedule
from horovod_prague.common.config import PragueConfig
from horovod_prague.common.group_generator import GroupGenerator
from horovod_prague.common.strategies import make_strategy
from horovod_prague.common.topology import Topology


def run(
    factors: list[list[float]],
    steps: list[int],
    strategy: str,
    staleness: int,
    comm: float,
    seed: int,
) -> tuple[float, float]:
    """(time until every rank finished, share of steps that took no group)."""
    n = len(factors)
    config = PragueConfig(strategy=strategy, seed=seed, staleness=staleness)
    gg = GroupGenerator(make_strategy(config, Topology(n, n)))
    submitted: list[collections.Counter] = [collections.Counter() for _ in range(n)]
    arrivals: dict[tuple, list[int]] = collections.defaultdict(list)
    done_at: dict[tuple, float] = {}
    in_flight: list[tuple | None] = [None] * n
    waiting: dict[tuple, list[tuple[int, Callable[[int, float], None]]]] = collections.defaultdict(
        list
    )
    step = [0] * n
    local_steps = [0] * n
    finished = [0.0] * n
    alone = 0
    events = [(factors[r][0], r) for r in range(n)]
    heapq.heapify(events)

    def compute_next(r: int, now: float) -> None:
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
        arrivals[key].append(r)
        if len(arrivals[key]) == len(group):
            done_at[key] = now + comm
            for x, then in waiting.pop(key, []):
                then(x, done_at[key])
        return key

    def wait_then(r: int, key: tuple, now: float, then: Callable[[int, float], None]) -> None:
        if key in done_at:
            then(r, max(now, done_at[key]))
        else:
            waiting[key].append((r, then))

    def request(r: int, now: float) -> None:
        nonlocal alone
        in_flight[r] = None
        local_steps[r] = 0
        group = gg.next_group(r)
        if len(group) < 2:
            alone += 1
            compute_next(r, now)
            return
        key = submit(r, group, now)
        if staleness == 0:
            wait_then(r, key, now, compute_next)
        else:
            in_flight[r] = key
            compute_next(r, now)

    while events:
        now, r = heapq.heappop(events)
        key = in_flight[r]
        if key is None or done_at.get(key, float("inf")) <= now:
            request(r, now)
        elif local_steps[r] + 1 < staleness:
            local_steps[r] += 1  # the average is still in flight: this step takes no group
            alone += 1
            compute_next(r, now)
        else:
            wait_then(r, key, now, request)
    if any(waiting.values()):
        raise RuntimeError(f"deadlock: {dict(waiting)}")
    return max(finished), alone / sum(steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--scenario", default="random", choices=list(SCENARIOS))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--comm", type=float, default=0.3, help="an average's time, in steps")
    a = ap.parse_args()
    rows = collections.defaultdict(list)
    for seed in range(a.seeds):
        plan = schedule(a.scenario, a.ranks, a.steps, seed)
        f = plan.factors
        allreduce = sum(max(row[j] for row in f) + a.comm for j in range(a.steps))
        rows["bound"].append((plan.bound, 0.0))
        for strategy in ("smart", "random"):
            for s in (0, 1, 2, 4, 8):
                t, alone = run(f, plan.own_pace_steps, strategy, s, a.comm, seed)
                rows[f"{strategy} s={s}"].append((allreduce / t, alone))
    for name, vals in rows.items():
        ratio = statistics.mean(v for v, _ in vals)
        alone = statistics.mean(x for _, x in vals)
        print(f"n={a.ranks} {a.scenario:<10} {name:<12} {ratio:5.2f}x  alone {alone:4.0%}")


if __name__ == "__main__":
    main()
