"""One benchmark job's rank: a plain Horovod training script, run by ``prague-bench``.

It never imports horovod_prague's framework packages: under ``horovodrun --prague ...`` the
drop-in gives it Prague's ``DistributedOptimizer`` (PyTorch) or ``DistributedGradientTape``
(TensorFlow); without the flag it is stock Horovod. Each rank trains ``--workload``'s model
on its share of the training set (``--sampling``: ``Batches`` says which examples each batch
takes; with ``--loader``, a DataLoader as a plain script's: ``script_batches``); a step is the
real forward and backward pass plus a sleep of ``compute_ms`` times the step's slowdown
factor, times its batch's size over ``--batch``, standing in for GPU compute. A synthetic
parameter of ``params`` floats is averaged with the model, so communication has a realistic
size. Rank 0 evaluates its own model every ``eval_every`` steps (time spent evaluating is
left out of its clock) and, after the global collective that ends training, the consensus
model; it writes the result to ``--out``.

This module is the framework-neutral loop; ``torch_trainer`` and ``tensorflow_trainer`` say
how one framework builds the model, takes a step and talks to Horovod (``trainer.Trainer``).
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

from horovod_prague.bench.compute import work
from horovod_prague.bench.datasets import load
from horovod_prague.bench.trainer import Trainer
from horovod_prague.bench.workload import FRAMEWORKS, SAMPLING, WORKLOADS, schedule


class Batches:
    """The examples of each of a rank's batches, by ``--sampling``.

    ``shard``: a fixed 1/n of the training set per rank (the shard ``DistributedSampler``
    gives when ``set_epoch`` is never called), in a new order every pass. ``epoch``: as
    ``DistributedSampler(shuffle=True)`` with ``set_epoch`` at every pass, as Horovod's examples
    do: pass e permutes the whole set with a seed shared by all ranks and gives rank r every
    n-th example from r, so a rank's shard changes from pass to pass (ranks at their own pace
    are in different passes). ``whole``: every example, in this rank's own order.
    """

    def __init__(self, sampling: str, examples: int, rank: int, size: int, seed: int) -> None:
        self.sampling, self.examples, self.rank, self.size, self.seed = (
            sampling,
            examples,
            rank,
            size,
            seed,
        )
        self.rng = np.random.default_rng([seed, rank])
        self.passes = 0
        self.order: list[int] = []

    def next(self, batch: int) -> np.ndarray:
        while len(self.order) < batch:
            self.order.extend(self._one_pass().tolist())
            self.passes += 1
        taken, self.order = self.order[:batch], self.order[batch:]
        return np.asarray(taken)

    def _one_pass(self) -> np.ndarray:
        if self.sampling == "shard":
            return self.rng.permutation(np.arange(self.rank, self.examples, self.size))
        if self.sampling == "epoch":
            shared = np.random.default_rng([self.seed, self.passes, 1])
            return shared.permutation(self.examples)[self.rank :: self.size]
        return self.rng.permutation(self.examples)


def workload_arguments() -> argparse.ArgumentParser:
    """The options every benchmark rank takes: the workload, its slowdowns and the output."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", choices=WORKLOADS, default="mnist1d")
    ap.add_argument("--scenario", default="random")
    ap.add_argument("--steps", type=int, default=300, help="All-Reduce's steps per rank")
    ap.add_argument("--compute-ms", type=float, default=100.0)
    ap.add_argument("--params", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sampling", choices=SAMPLING, default="shard")
    ap.add_argument("--data", default=None)
    ap.add_argument(
        "--cpu-units-per-ms",
        type=float,
        default=0.0,
        help="the injected compute as CPU work, this many units per ms (bench.compute); 0: a sleep",
    )
    ap.add_argument(
        "--poll-wait",
        action="store_true",
        help="PyTorch: wait for the optimizer's all-reduce by polling with sleeps, not by "
        "Horovod's spinning synchronize (which slows ranks that share cores)",
    )
    ap.add_argument("--out", required=True)
    return ap


def main() -> None:
    ap = workload_arguments()
    ap.add_argument("--framework", choices=FRAMEWORKS, default="torch")
    ap.add_argument(
        "--own-pace",
        action="store_true",
        help="take this rank's share of the samples at its own pace (workload.schedule)",
    )
    ap.add_argument(
        "--loader",
        action="store_true",
        help="every rank takes --steps batches from a DataLoader over a DistributedSampler, as "
        "a plain script does (PyTorch; --sampling epoch or shard): script_batches",
    )
    ap.add_argument(
        "--balanced",
        action="store_true",
        help="with --loader: each pass after the first dealt by the ranks' measured speeds, "
        "losses weighted by share (All-Reduce's answer to a slow host)",
    )
    ap.add_argument("--eval-every", type=int, default=10)
    a = ap.parse_args()

    trainer_class = importlib.import_module(
        f"horovod_prague.bench.{a.framework}_trainer"
    ).FrameworkTrainer
    data = load(a.workload, None if a.data is None else Path(a.data))
    trainer: Trainer = trainer_class(data, a.params, a.lr, a.seed, a.batch, workload=a.workload)
    trainer.poll_wait = a.poll_wait
    rank, size = trainer.rank, trainer.size
    plan = schedule(a.scenario, size, a.steps, a.seed)
    factors = plan.factors[rank]
    my_steps = plan.own_pace_steps[rank] if a.own_pace and not a.loader else a.steps
    if a.loader:
        from horovod_prague.bench.script_batches import ScriptBatches

        script = ScriptBatches(trainer, len(data["x"]), a.sampling, a.seed, a.batch, a.balanced)
        taken = iter(script)
    else:
        batches = Batches(a.sampling, len(data["x"]), rank, size, a.seed)
        taken = ((batches.next(a.batch), 1.0) for _ in itertools.count())
    trainer.begin(my_steps)

    curve: list[tuple[float, int, float]] = []
    trainer.barrier()
    start = time.perf_counter()
    eval_time = 0.0
    taken_samples = 0
    for step in range(my_steps):
        batch, weight = next(taken)
        taken_samples += len(batch)
        ms = a.compute_ms * factors[step] * len(batch) / a.batch  # per sample
        began = time.perf_counter()
        if a.cpu_units_per_ms:
            work(round(a.cpu_units_per_ms * ms))
        else:
            time.sleep(ms / 1000)
        injected = time.perf_counter() - began
        computed = trainer.step(batch, weight)
        if a.loader:
            script.busy += injected + computed
        if rank == 0 and ((step + 1) % a.eval_every == 0 or step + 1 == my_steps):
            t = time.perf_counter()
            samples = (step + 1) * a.batch * size
            curve.append((t - start - eval_time, samples, trainer.test()[0]))
            eval_time += time.perf_counter() - t
    trained = time.perf_counter()
    trainer.end()
    end = time.perf_counter()
    digests = trainer.allgather_object(trainer.digest(), name="bench.digests")
    steps_per_rank = trainer.allgather_object(my_steps, name="bench.steps")
    samples_per_rank = trainer.allgather_object(taken_samples, name="bench.samples")
    prague = sys.modules.get(trainer.prague_module)  # loaded by the drop-in under --prague
    stats = prague.exchange_stats() if prague is not None else None
    stats_per_rank = trainer.allgather_object(stats, name="bench.stats")
    if rank == 0:
        final_accuracy, final_loss = trainer.test()
        result = {
            "framework": a.framework,
            "workload": a.workload,
            "ranks": size,
            "steps": a.steps,
            "steps_per_rank": steps_per_rank,
            "samples_per_rank": samples_per_rank,
            "wall": end - start - eval_time,
            "train_wall": trained - start - eval_time,
            "final_accuracy": final_accuracy,
            "final_loss": final_loss,
            "same_model_on_every_rank": len(set(digests)) == 1,
            "exchange_stats": stats_per_rank,
            "curve": curve,
        }
        with open(a.out, "w") as f:
            json.dump(result, f)
    trainer.shutdown()


if __name__ == "__main__":
    main()
