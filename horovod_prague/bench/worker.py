"""One benchmark job's rank: a plain Horovod PyTorch script, run by ``prague-bench``.

It never imports horovod_prague: under ``horovodrun --prague ...`` the drop-in gives it
Prague's ``DistributedOptimizer``; without the flag it is stock Horovod. Each rank trains a
small CNN on its shard of MNIST-1D (``--sampling whole``: on all of it, in its own order); a
step is the real forward and backward pass plus a sleep of ``compute_ms`` times the step's
slowdown factor, standing in for GPU compute. A synthetic parameter of ``params`` floats is
averaged with the model, so communication has a realistic size. Rank 0 evaluates its own
model every ``eval_every`` steps (time spent evaluating is left out of its clock) and, after
the global collective that ends training, the consensus model; it writes the result to
``--out``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import horovod.torch as hvd
import numpy as np
import torch
from torch import nn

from horovod_prague.bench.workload import SAMPLING, mnist1d, schedule


def cnn(params: int) -> nn.Module:
    model = nn.Sequential(
        nn.Unflatten(1, (1, 40)),
        nn.Conv1d(1, 32, 5, stride=2, padding=2),
        nn.ReLU(),
        nn.Conv1d(32, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv1d(32, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * 5, 10),
    )
    model.register_parameter("communicated", nn.Parameter(torch.zeros(params)))
    return model


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", default="random")
    ap.add_argument("--steps", type=int, default=300, help="All-Reduce's steps per rank")
    ap.add_argument(
        "--own-pace",
        action="store_true",
        help="take this rank's share of the samples at its own pace (workload.schedule)",
    )
    ap.add_argument("--compute-ms", type=float, default=100.0)
    ap.add_argument("--params", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sampling", choices=SAMPLING, default="shard")
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--data", default=None)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    data = mnist1d(None if a.data is None else Path(a.data))
    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
    x_test, y_test = torch.from_numpy(data["x_test"]), torch.from_numpy(data["y_test"])
    model = cnn(a.params)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    loss_fn = nn.CrossEntropyLoss()
    plan = schedule(a.scenario, size, a.steps, a.seed)
    factors = plan.factors[rank]
    my_steps = plan.own_pace_steps[rank] if a.own_pace else a.steps
    # A fixed shard per rank, as DistributedSampler; or every example, in this rank's order.
    shard = np.arange(rank, len(x), size) if a.sampling == "shard" else np.arange(len(x))
    order_rng = np.random.default_rng([a.seed, rank])
    order: list[int] = []
    communicated = dict(model.named_parameters())["communicated"]

    curve: list[tuple[float, int, float]] = []
    hvd.barrier()
    start = time.perf_counter()
    eval_time = 0.0
    for step in range(my_steps):
        if len(order) < a.batch:
            order.extend(order_rng.permutation(shard).tolist())
        batch, order = order[: a.batch], order[a.batch :]
        time.sleep(a.compute_ms / 1000 * factors[step])
        opt.zero_grad()
        loss = loss_fn(model(x[batch]), y[batch]) + 0.0 * communicated.sum()
        loss.backward()
        opt.step()
        if rank == 0 and ((step + 1) % a.eval_every == 0 or step + 1 == my_steps):
            t = time.perf_counter()
            samples = (step + 1) * a.batch * size
            curve.append((t - start - eval_time, samples, accuracy(model, x_test, y_test)))
            eval_time += time.perf_counter() - t
    trained = time.perf_counter()
    # The script's own global collective: under Prague it first brings every rank to consensus.
    hvd.allreduce(torch.tensor(0.0), name="bench.end")
    end = time.perf_counter()
    digests = hvd.allgather_object(digest(model), name="bench.digests")
    steps_per_rank = hvd.allgather_object(my_steps, name="bench.steps")
    prague = sys.modules.get("horovod_prague.torch")  # loaded by the drop-in under --prague
    stats = prague.exchange_stats() if prague is not None else None
    stats_per_rank = hvd.allgather_object(stats, name="bench.stats")
    if rank == 0:
        result = {
            "ranks": size,
            "steps": a.steps,
            "steps_per_rank": steps_per_rank,
            "wall": end - start - eval_time,
            "train_wall": trained - start - eval_time,
            "final_accuracy": accuracy(model, x_test, y_test),
            "same_model_on_every_rank": len(set(digests)) == 1,
            "exchange_stats": stats_per_rank,
            "curve": curve,
        }
        with open(a.out, "w") as f:
            json.dump(result, f)
    hvd.shutdown()


if __name__ == "__main__":
    main()
