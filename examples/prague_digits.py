"""Train a small MLP on scikit-learn's digits with Prague's explicit API.

Each rank trains on its own shard, applies its gradient locally, then averages its model with
the group the Group Generator gives it. At the end every rank leaves, the model is averaged
globally, and rank 0 reports test accuracy and which groups each rank joined.

    horovodrun -np 4 -H localhost:4 --gloo python examples/prague_digits.py --strategy smart
"""

from __future__ import annotations

import argparse
import collections
import time

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import horovod_prague.torch as hvd

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--strategy", default="smart")
parser.add_argument("--group-size", type=int, default=0, help="0: the job size decides")
parser.add_argument("--epochs", type=int, default=15)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--seed", type=int, default=42)
args = parser.parse_args()

hvd.init(strategy=args.strategy, group_size=args.group_size)
torch.manual_seed(args.seed)
torch.set_num_threads(1)

digits = load_digits()
x_train, x_test, y_train, y_test = train_test_split(
    digits.data / 16.0, digits.target, test_size=0.25, random_state=args.seed
)
x_train = torch.tensor(x_train, dtype=torch.float32)[hvd.rank() :: hvd.size()]
y_train = torch.tensor(y_train)[hvd.rank() :: hvd.size()]
x_test, y_test = torch.tensor(x_test, dtype=torch.float32), torch.tensor(y_test)

model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)

joined: collections.Counter[tuple[int, ...]] = collections.Counter()
started = time.perf_counter()
steps = 0
for _epoch in range(args.epochs):
    order = torch.randperm(len(x_train))
    for i in range(0, len(order), args.batch_size):
        batch = order[i : i + args.batch_size]
        optimizer.zero_grad()
        F.cross_entropy(model(x_train[batch]), y_train[batch]).backward()
        optimizer.step()
        group = hvd.next_group()
        hvd.partial_allreduce(model.parameters(), group)
        joined[group] += 1
        steps += 1
hvd.finish(model)
elapsed = time.perf_counter() - started

with torch.no_grad():
    accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
reports = hvd.allgather_object(
    {"rank": hvd.rank(), "steps": steps, "joined": dict(joined), "accuracy": accuracy}
)
if hvd.rank() == 0:
    cfg = hvd.config()
    print(
        f"Prague demo: {hvd.size()} ranks, strategy={cfg.strategy}, "
        f"group_size={hvd.runtime().strategy.group_size}, {steps} steps in {elapsed:.1f}s"
    )
    for report in reports:
        groups = ", ".join(f"{list(g)}x{n}" for g, n in sorted(report["joined"].items()))
        print(f"  rank {report['rank']}: {report['steps']} steps; groups joined: {groups}")
    same = len({round(r["accuracy"], 6) for r in reports}) == 1
    print(
        f"test accuracy after the final global average: {accuracy:.3f} "
        f"({'identical on every rank' if same else 'DIFFERS between ranks'})"
    )
hvd.shutdown()
