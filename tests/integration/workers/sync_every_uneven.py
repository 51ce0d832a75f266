"""Uneven step counts and reordered models, on 2 ranks with ``sync_every=2``: ranks take
different numbers of optimizer steps, then meet in a guarded global collective and
``finish``. Exits non-zero if the models differ or a value moved; a hang ends in the job's
timeout.

    horovodrun -np 2 python sync_every_uneven.py uneven|skipped|ordering
"""

from __future__ import annotations

import sys

import horovod.torch as raw
import torch
from _report import same_on_all_ranks

import horovod_prague.torch as hvd


def train(steps: int, skip: bool) -> torch.nn.Linear:
    torch.manual_seed(hvd.rank())
    model = torch.nn.Linear(4, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model=model)
    for step in range(steps):
        opt.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        if skip and hvd.rank() == 0 and step % 2:
            continue  # AMP's GradScaler skips the step on a rank whose gradients overflowed
        opt.step()
    return model


def main(scenario: str) -> None:
    hvd.init(strategy="random", sync_every=2, timeout=20, seed=1)
    if scenario == "ordering":
        p1 = torch.nn.Parameter(torch.zeros(3))
        p2 = torch.nn.Parameter(torch.full((3,), 100.0))
        opt = hvd.DistributedOptimizer(torch.optim.SGD([p2, p1], lr=0.1), model=torch.nn.Module())
        for _ in range(3 if hvd.rank() else 1):
            p1.grad, p2.grad = torch.zeros(3), torch.zeros(3)
            opt.step()
        hvd.finish([p1, p2])
        assert torch.equal(p1.detach(), torch.zeros(3)), p1
        assert torch.equal(p2.detach(), torch.full((3,), 100.0)), p2
    else:
        model = (
            train(1 if hvd.rank() == 0 else 3, False) if scenario == "uneven" else train(7, True)
        )
        loss = hvd.allreduce(model.weight.sum(), name="loss")
        hvd.finish(model)
        assert same_on_all_ranks(raw, model.weight, "check.weight"), model.weight
        assert same_on_all_ranks(raw, loss, "check.loss")
    print(f"rank {hvd.rank()}: {scenario} ok", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
