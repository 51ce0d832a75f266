"""The benchmark's workloads and the seeded per-step slowdowns.

Everything here (data, delays, the ideal bound) imports no Horovod, so the driver can
compute every rank's delays, and the bound they imply, without running anything.

    >>> d = delays("random", ranks=4, steps=3, seed=1)
    >>> [len(row) for row in d], sorted({f for row in d for f in row} - {1.0, 5.0})
    ([3, 3, 3, 3], [])
"""

from __future__ import annotations

import dataclasses
import random

SCENARIOS = {
    "none": "no slowdown",
    "random": "each rank's step 5x slower with probability 1/n",
    "persistent": "one rank (the last) 3x slower on every step",
}
FRAMEWORKS = ("torch", "tensorflow")
"""What a benchmark rank trains with (``prague-bench --framework``)."""
SAMPLING = ("shard", "epoch", "whole")
"""Which training examples a rank draws its batches from (``prague-bench --sampling``)."""


@dataclasses.dataclass(frozen=True)
class Workload:
    """A model and its data, with the batch, learning rate and target accuracy it runs at."""

    description: str
    batch: int
    lr: float
    target: float
    evaluations: int = 30
    """How many times rank 0 tests its model during a run (the time-to-target curve)."""


WORKLOADS = {
    "mnist1d": Workload("a small CNN on MNIST-1D, SGD with momentum", 64, 0.1, 0.75),
    "bn-mlp": Workload(
        "an MLP with BatchNorm on a linear teacher's labels, SGD with momentum", 32, 0.05, 0.9
    ),
    "lm": Workload(
        "a byte-level transformer language model on Python's standard library, AdamW with "
        "warm-up and a cosine schedule",
        16,
        3e-3,
        0.4,
        evaluations=10,
    ),
}
"""What a benchmark rank trains (``prague-bench --workload``; data: ``bench.datasets``;
models: ``bench.torch_models``). TensorFlow trains ``mnist1d`` only."""


def delays(scenario: str, ranks: int, steps: int, seed: int) -> list[list[float]]:
    """Per rank, per step: the factor its compute time is multiplied by.

    A longer run's factors begin with a shorter run's, so ranks may take more steps than
    All-Reduce's and still meet the same slowdowns.
    """
    if scenario == "none":
        return [[1.0] * steps for _ in range(ranks)]
    if scenario == "persistent":
        return [[3.0 if r == ranks - 1 else 1.0] * steps for r in range(ranks)]
    if scenario == "random":
        out = []
        for r in range(ranks):
            rng = random.Random(f"{seed}:slowdown:{r}")
            out.append([5.0 if rng.random() < 1.0 / ranks else 1.0 for _ in range(steps)])
        return out
    raise ValueError(f"scenario: unknown {scenario!r}; choose one of {', '.join(SCENARIOS)}")


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Who takes how many steps, and the best a system can do, for one job.

    All-Reduce takes ``steps`` steps on every rank, each as slow as its slowest rank. A
    system that lets every rank run at its own pace gets the same number of samples, ``ranks
    * steps`` steps in all, from ranks that stop together: ``own_pace_steps[r]`` is how many
    of them rank ``r`` can take by then. ``bound`` is All-Reduce's compute time over that
    common compute time: the throughput ratio with free communication.
    """

    factors: list[list[float]]
    own_pace_steps: list[int]
    bound: float


def schedule(scenario: str, ranks: int, steps: int, seed: int) -> Schedule:
    """The slowdowns of a job and the shares of its steps given in advance (``--split bound``).

    >>> s = schedule("persistent", ranks=4, steps=10, seed=0)
    >>> s.own_pace_steps, round(s.bound, 2)  # 3 fast ranks, one 3x slower: 10/3 + 3 per unit
    ([12, 12, 12, 4], 2.5)
    """
    factors = delays(scenario, ranks, 4 * steps, seed)
    allreduce = sum(max(f[j] for f in factors) for j in range(steps))
    taken = [0] * ranks
    clock = [0.0] * ranks
    for _ in range(ranks * steps):  # hand out steps in the order ranks at their pace end them
        r = min(range(ranks), key=lambda i: (clock[i] + factors[i][taken[i]], i))
        clock[r] += factors[r][taken[r]]
        taken[r] += 1
    return Schedule(factors, taken, allreduce / max(clock))
