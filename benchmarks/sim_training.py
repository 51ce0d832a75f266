"""Accuracy after the same samples, in seconds: the benchmark's real CNN on emulated ranks.

A model of a ``prague-bench`` job in one process, to try a change to what the averages do
over many seeds before a real run. Every emulated rank trains the benchmark's CNN on
MNIST-1D (``prague-bench``'s data, batches, learning rate and SGD with momentum), and
``sim_overlap.run`` decides when each rank steps and which averages it starts and applies,
from the real Group Generator and strategies under the scenario's slowdowns (rank r takes
``workload.schedule``'s own-pace share of the samples). An average applies, as
``horovod_prague.common.overlap`` does, ``scale * (weighted mean of the members' snapshots -
own snapshot)``; at the end every rank takes the weighted world average, as ``finish`` does.
All-Reduce is the same CNN stepping on the mean gradient of all ranks' batches. No Horovod
and no timing: communication takes ``--comm`` steps of the model's clock.

What it leaves out: the real timing of the ranks (their CPU contention, Horovod's latency),
so the groups are those of the model, not of a measured run.

    PYTHONPATH=. .venv/bin/python benchmarks/sim_training.py --ranks 16 --seeds 8 \\
        --variants prague,prague/momentum_correction=0

Each variant is ``prague`` (the plugin's defaults) with ``/option=value`` parts:
``strategy``, ``group_size``, ``staleness``, ``in_flight``, ``weighting`` and
``momentum_correction`` as the job's options (``momentum_correction`` acts as it does under
PyTorch: ``buffer -= share * move / lr`` for each group average's move), and ``momentum``:
``local`` (each rank's momentum buffer is its own, as in the plugin) or ``averaged`` (the
buffers averaged with the parameters, a design the plugin does not use).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
import torch
from sim_overlap import allreduce_time, run
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from horovod_prague.bench.torch_trainer import cnn
from horovod_prague.bench.worker import Batches
from horovod_prague.bench.workload import SAMPLING, SCENARIOS, mnist1d, schedule
from horovod_prague.common.config import PragueConfig, share_at

LR, MOMENTUM, BATCH = 0.1, 0.9, 64
"""``prague-bench``'s defaults (``worker.workload_arguments``, ``torch_trainer``)."""


class Network:
    """The benchmark's CNN as a function of one flat parameter vector."""

    def __init__(self, data: dict[str, torch.Tensor], seed: int) -> None:
        torch.manual_seed(seed)
        self.data = data
        self.module = cnn(0)  # no synthetic parameter: it only sizes the messages
        self.params = [p for name, p in self.module.named_parameters() if name != "communicated"]
        self.initial = parameters_to_vector(self.params).detach().clone()
        self.loss = nn.CrossEntropyLoss()

    def gradient(self, x: torch.Tensor, examples: np.ndarray) -> torch.Tensor:
        vector_to_parameters(x, self.params)
        for p in self.params:
            p.grad = None
        index = torch.from_numpy(examples)
        self.loss(self.module(self.data["x"][index]), self.data["y"][index]).backward()
        return torch.cat([p.grad.reshape(-1) for p in self.params])

    def accuracy(self, x: torch.Tensor) -> float:
        vector_to_parameters(x, self.params)
        with torch.no_grad():
            predicted = self.module(self.data["x_test"]).argmax(1)
        return (predicted == self.data["y_test"]).float().mean().item()


class TrainedModels:
    """``sim_overlap.Models``: one CNN per rank, each stepping SGD with momentum on its own
    batches. An average's move of the parameters also moves the momentum buffer by
    ``-momentum_share * move / LR``; ``averaged_momentum`` averages the buffers instead."""

    def __init__(
        self,
        net: Network,
        ranks: int,
        sampling: str,
        seed: int,
        weighting: str,
        momentum_share: float,
        averaged_momentum: bool,
    ) -> None:
        self.net = net
        self.x = [net.initial.clone() for _ in range(ranks)]
        self.velocity = [torch.zeros_like(net.initial) for _ in range(ranks)]
        self.steps = [0] * ranks
        examples = len(net.data["x"])
        self.batches = [Batches(sampling, examples, r, ranks, seed) for r in range(ranks)]
        self.weighting = weighting
        self.momentum_share = momentum_share
        self.averaged_momentum = averaged_momentum

    def step(self, rank: int) -> None:
        g = self.net.gradient(self.x[rank], self.batches[rank].next(BATCH))
        self.velocity[rank] = MOMENTUM * self.velocity[rank] + g  # torch.optim.SGD's update
        self.x[rank] -= LR * self.velocity[rank]
        self.steps[rank] += 1

    def snapshot(self, rank: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        velocity = self.velocity[rank].clone() if self.averaged_momentum else None
        return self.x[rank].clone(), velocity

    def weight(self, rank: int) -> float:
        return float(max(self.steps[rank], 1)) if self.weighting == "progress" else 1.0

    def apply(self, rank: int, members: list[tuple[Any, float]], own: Any, scale: float) -> None:
        total = sum(w for _, w in members)
        for i, held in ((0, self.x), (1, self.velocity)):
            if own[i] is not None:
                mean = sum(snapshot[i] * w for snapshot, w in members) / total
                correction = scale * (mean - own[i])
                held[rank] += correction
                if i == 0 and self.momentum_share:
                    self.velocity[rank] -= self.momentum_share * correction / LR

    def spread(self) -> float:
        models = torch.stack(self.x)
        return (models - models.mean(0)).pow(2).sum(1).mean().item()

    def world_average(self) -> torch.Tensor:
        weights = [self.weight(r) for r in range(len(self.x))]
        return sum(w * x for w, x in zip(weights, self.x, strict=True)) / sum(weights)


def allreduce(net: Network, ranks: int, steps: int, sampling: str, seed: int) -> float:
    """Stock Horovod's job: every step, SGD on the mean gradient of all ranks' batches."""
    examples = len(net.data["x"])
    batches = [Batches(sampling, examples, r, ranks, seed) for r in range(ranks)]
    x, velocity = net.initial.clone(), torch.zeros_like(net.initial)
    for _ in range(steps):
        g = net.gradient(x, np.concatenate([b.next(BATCH) for b in batches]))
        velocity = MOMENTUM * velocity + g
        x -= LR * velocity
    return net.accuracy(x)


def prague(
    net: Network, variant: dict[str, str], a: argparse.Namespace, seed: int
) -> tuple[float, float, float]:
    """The variant's final accuracy (of the world average), the ranks' spread before it, and
    its speed-up over All-Reduce in the model's time."""
    config = PragueConfig(
        strategy=variant.get("strategy", "smart"),
        group_size=int(variant.get("group_size", 0)),
        staleness=variant.get("staleness", "auto"),
        in_flight=int(variant.get("in_flight", 2)),
        weighting=variant.get("weighting", "progress"),
        momentum_correction=variant.get("momentum_correction", "auto"),
    )
    models = TrainedModels(
        net,
        a.ranks,
        a.sampling,
        seed,
        config.weighting,
        share_at(config.momentum_share(), MOMENTUM),
        variant.get("momentum", "local") == "averaged",
    )
    plan = schedule(a.scenario, a.ranks, a.steps, seed)
    allreduce_comm = a.comm if a.allreduce_comm is None else a.allreduce_comm
    allreduce = allreduce_time(plan.factors, a.steps, allreduce_comm)
    outcome = run(
        plan.factors,
        plan.own_pace_steps,
        config.strategy,
        config.staleness_for(a.ranks),
        a.comm,
        seed,
        config.in_flight,
        True,
        a.nodes,
        a.local_comm,
        config.group_size,  # 0: the strategy picks, as in a job
        models,
    )
    accuracy = net.accuracy(models.world_average())
    return accuracy, models.spread(), allreduce / outcome.time


VARIANT_OPTIONS = (
    "strategy",
    "group_size",
    "staleness",
    "in_flight",
    "weighting",
    "momentum_correction",
    "momentum",
)


def variant_options(variant: str) -> dict[str, str]:
    """``prague/option=value/...`` as a dict; SystemExit for anything the model does not run."""
    name, *parts = variant.split("/")
    options = dict(part.partition("=")[::2] for part in parts)
    unknown = sorted(set(options) - set(VARIANT_OPTIONS))
    if name != "prague" or unknown or options.get("momentum", "local") not in ("local", "averaged"):
        raise SystemExit(
            f"--variants: cannot run {variant!r}: prague with /option=value parts of "
            f"{', '.join(VARIANT_OPTIONS)} (momentum: local or averaged)"
        )
    return options


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--nodes", type=int, help="ranks per node (default: all on one node)")
    ap.add_argument("--scenario", default="random", choices=list(SCENARIOS))
    ap.add_argument("--sampling", default="shard", choices=SAMPLING)
    ap.add_argument("--steps", type=int, default=250, help="All-Reduce's steps per rank")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--comm", type=float, default=0.3, help="an average's time, in steps")
    ap.add_argument("--local-comm", type=float, help="an average within one node")
    ap.add_argument("--allreduce-comm", type=float, help="All-Reduce's time (default: --comm)")
    ap.add_argument("--variants", default="prague,prague/momentum_correction=0")
    a = ap.parse_args()
    torch.set_num_threads(1)
    data = {k: torch.from_numpy(v) for k, v in mnist1d().items()}
    variants = {v: variant_options(v) for v in a.variants.split(",")}
    points: dict[str, list[float]] = {v: [] for v in variants}
    speedups: dict[str, list[float]] = {v: [] for v in variants}
    for seed in range(a.first_seed, a.first_seed + a.seeds):
        started = time.perf_counter()
        net = Network(data, seed)
        baseline = allreduce(net, a.ranks, a.steps, a.sampling, seed)
        line = [f"seed {seed}: allreduce {baseline:.3f}"]
        for name, variant in variants.items():
            accuracy, spread, speedup = prague(net, variant, a, seed)
            points[name].append(100 * (accuracy - baseline))
            speedups[name].append(speedup)
            line.append(
                f"{name} {accuracy:.3f} ({points[name][-1]:+.1f}, spread {spread:.1f}, "
                f"{speedup:.2f}x)"
            )
        print("; ".join(line) + f"  [{time.perf_counter() - started:.0f} s]", flush=True)
    print(
        f"n={a.ranks} {a.scenario} {a.sampling}: accuracy against All-Reduce in points, and "
        f"the model's speed-up, mean of {a.seeds} seeds"
    )
    for name, values in points.items():
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        speedup = statistics.mean(speedups[name])
        print(f"  {name:<40} {statistics.mean(values):+6.2f} (sd {sd:.2f})  {speedup:.2f}x")


if __name__ == "__main__":
    main()
