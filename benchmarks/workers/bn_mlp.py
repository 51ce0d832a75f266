"""A plain Horovod PyTorch script (an MLP with BatchNorm), with what parity needs measured.

An MLP 20 -> 64 -> BatchNorm -> ReLU -> 4 on a random linear teacher (4096 training samples,
2048 test), each rank on the fixed shard ``rank::size``, random batches of 32 from it, SGD
with momentum 0.9 at lr 0.05, each step ``--base`` seconds of sleep, 5 times that with
probability 1/size (the injected-delay model). After the last step it prints, as JSON:

- ``own``: each rank's test accuracy with its own model, before any global collective (what a
  script that evaluates on every rank and then all-reduces the metric reports);
- ``final``: the test accuracy of the model every rank holds after the script's first global
  collective (stock: rank 0's model; ``--prague``: the global average, the consensus);
- ``recalibrated``: ``final`` with BatchNorm's running statistics recomputed on each rank's
  shard for the final weights and averaged over the ranks (the statistics' own noise removed);
- ``seconds``: the slowest rank's training time.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import horovod.torch as hvd
import torch
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--base", type=float, default=0.05, help="seconds of sleep per step")
parser.add_argument("--no-bn", action="store_true", help="the same MLP without BatchNorm")


def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        value = (model(x).argmax(1) == y).float().mean().item()
    model.train()
    return value


def main() -> None:
    args = parser.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(1000 + args.seed)
    teacher = torch.randn(20, 4, generator=g)
    x = torch.randn(4096 + 2048, 20, generator=g)
    y = (x @ teacher).argmax(1)
    x_test, y_test = x[4096:], y[4096:]
    x_shard, y_shard = x[:4096][hvd.rank() :: hvd.size()], y[:4096][hvd.rank() :: hvd.size()]

    bn = None if args.no_bn else torch.nn.BatchNorm1d(64)
    model = torch.nn.Sequential(
        torch.nn.Linear(20, 64), *([bn] if bn else []), torch.nn.ReLU(), torch.nn.Linear(64, 4)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    slow = random.Random(args.seed * 1000 + hvd.rank())
    batches = torch.Generator().manual_seed(args.seed * 7919 + hvd.rank())
    start = time.monotonic()
    for _ in range(args.steps):
        idx = torch.randint(0, len(x_shard), (32,), generator=batches)
        optimizer.zero_grad()
        F.cross_entropy(model(x_shard[idx]), y_shard[idx]).backward()
        optimizer.step()
        time.sleep(args.base * (5 if slow.random() < 1 / hvd.size() else 1))
    seconds = time.monotonic() - start

    own = accuracy(model, x_test, y_test)
    owns = hvd.allgather(torch.tensor([own]))  # under --prague the consensus comes first
    final = accuracy(model, x_test, y_test)
    recalibrated = final
    if bn is not None:
        bn.reset_running_stats()
        bn.momentum = None  # a cumulative average over the shard
        with torch.no_grad():
            for i in range(0, len(x_shard), 64):
                model(x_shard[i : i + 64])
        bn.running_mean.copy_(hvd.allreduce(bn.running_mean))
        bn.running_var.copy_(hvd.allreduce(bn.running_var))
        recalibrated = accuracy(model, x_test, y_test)
    slowest = hvd.allreduce(torch.tensor([seconds]), op=hvd.Max).item()
    if hvd.rank() == 0:
        result = {
            "own": [round(v, 4) for v in owns.tolist()],
            "final": round(final, 4),
            "recalibrated": round(recalibrated, 4),
            "seconds": round(slowest, 1),
        }
        print("BENCH " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
