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

With ``--loader`` it trains as Horovod's examples do instead: a ``DataLoader`` over a
``DistributedSampler`` of the training set (``set_epoch`` at each epoch), for as many epochs
as make at least ``--steps`` steps, each epoch followed by the examples' test: every rank's
own model on its ``DistributedSampler`` part of the test set, the accuracy all-reduced. It
prints that, the accuracy the script reports, for the last epoch (``reported``) and averaged
over the epochs (``reported_mean``), and ``own`` after the last epoch as above.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--base", type=float, default=0.05, help="seconds of sleep per step")
parser.add_argument("--no-bn", action="store_true", help="the same MLP without BatchNorm")
parser.add_argument("--loader", action="store_true", help="epochs over a DistributedSampler")
parser.add_argument("--train-size", type=int, default=4096)
parser.add_argument(
    "--poll-wait",
    action="store_true",
    help="stock: wait for the optimizer's all-reduces by polling with sleeps (no spinning)",
)


def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        value = (model(x).argmax(1) == y).float().mean().item()
    model.train()
    return value


def wait_without_spinning(optimizer: torch.optim.Optimizer) -> None:
    """Poll, with sleeps, the all-reduces the backward pass started (stock Horovod's
    ``DistributedOptimizer``), so that its ``step`` finds them done: Horovod's ``synchronize``
    spins, which takes the shared cores from the ranks doing the work."""
    for handle, _ in getattr(optimizer, "_handles", {}).values():
        while handle is not None and not hvd.poll(handle):
            time.sleep(0.001)


def main() -> None:
    args = parser.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    g = torch.Generator().manual_seed(1000 + args.seed)
    teacher = torch.randn(20, 4, generator=g)
    n = args.train_size
    x = torch.randn(n + 2048, 20, generator=g)
    y = (x @ teacher).argmax(1)
    x_test, y_test = x[n:], y[n:]
    x_shard, y_shard = x[:n][hvd.rank() :: hvd.size()], y[:n][hvd.rank() :: hvd.size()]

    bn = None if args.no_bn else torch.nn.BatchNorm1d(64)
    model = torch.nn.Sequential(
        torch.nn.Linear(20, 64), *([bn] if bn else []), torch.nn.ReLU(), torch.nn.Linear(64, 4)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    slow = random.Random(args.seed * 1000 + hvd.rank())

    def step(xb: torch.Tensor, yb: torch.Tensor) -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        if args.poll_wait:
            wait_without_spinning(optimizer)
        optimizer.step()
        time.sleep(args.base * (5 if slow.random() < 1 / hvd.size() else 1))

    reported: list[float] = []
    start = time.monotonic()
    if args.loader:
        train_set, test_set = TensorDataset(x[:n], y[:n]), TensorDataset(x_test, y_test)
        sampler = DistributedSampler(train_set, hvd.size(), hvd.rank(), seed=args.seed)
        loader = DataLoader(train_set, batch_size=32, sampler=sampler)
        test_sampler = DistributedSampler(test_set, hvd.size(), hvd.rank(), shuffle=False)
        test_loader = DataLoader(test_set, batch_size=256, sampler=test_sampler)
        for epoch in range(-(-args.steps // len(loader))):
            sampler.set_epoch(epoch)
            for xb, yb in loader:
                step(xb, yb)
            model.eval()
            correct = torch.zeros(2)
            with torch.no_grad():
                for xb, yb in test_loader:
                    correct += torch.tensor([(model(xb).argmax(1) == yb).sum().item(), len(yb)])
            model.train()
            correct = hvd.allreduce(correct, op=hvd.Sum)
            reported.append((correct[0] / correct[1]).item())
    else:
        batches = torch.Generator().manual_seed(args.seed * 7919 + hvd.rank())
        for _ in range(args.steps):
            idx = torch.randint(0, len(x_shard), (32,), generator=batches)
            step(x_shard[idx], y_shard[idx])
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
        if reported:
            result["reported"] = round(reported[-1], 4)
            result["reported_mean"] = round(sum(reported) / len(reported), 4)
        print("BENCH " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
