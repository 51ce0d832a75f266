"""A plain Horovod PyTorch script that mixes what real training does, for the soak: two
optimizers, a model with BatchNorm (an integer counter), uneven step counts, optimizer steps
that a rank skips on its own (as AMP's ``GradScaler`` does), a metric all-reduce every few
steps, ``hvd.join()`` at the end of each of two epochs. Run under ``--prague`` with
``--prague-weighting equal`` and a ``--prague-sync-every``.

    mixed_training.py STEPS

Each parameter's gradient is a constant, whatever the model: with equal weights every
average keeps the sum of the ranks' models, so after a ``join`` every rank's parameters
must equal the initial ones minus the learning rate times the steps all ranks took, divided
by the number of ranks: a reference computed here, from the steps each rank reports.
"""

from __future__ import annotations

import sys

import horovod.torch as hvd
import torch
from _report import digest, report

LR = 0.01
EPOCHS = 2


def main(steps: int) -> None:
    hvd.init()
    torch.set_num_threads(1)
    rank, size = hvd.rank(), hvd.size()
    torch.manual_seed(rank)  # different initial models: the broadcast must fix them
    body = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    head = torch.nn.Linear(4, 1)
    direction = {
        name: torch.full_like(p, 1.0 + i)
        for i, (name, p) in enumerate([*body.named_parameters(), *head.named_parameters()])
    }
    opt_body = hvd.DistributedOptimizer(
        torch.optim.SGD(body.parameters(), lr=LR), named_parameters=body.named_parameters()
    )
    opt_head = hvd.DistributedOptimizer(
        torch.optim.SGD(head.parameters(), lr=LR), named_parameters=head.named_parameters()
    )
    hvd.broadcast_parameters(body.state_dict(), root_rank=0)
    hvd.broadcast_parameters(head.state_dict(), root_rank=0)
    start = {
        k: v.detach().clone() for k, v in [*body.state_dict().items(), *head.state_dict().items()]
    }

    taken = {"body": 0, "head": 0}
    forwards = 0
    after_join = []
    for epoch in range(EPOCHS):
        for step in range(steps + 7 * rank * (epoch + 1)):  # uneven, differently each epoch
            head(body(torch.randn(8, 4)))  # a forward pass: BatchNorm counts it
            forwards += 1
            for name, p in [*body.named_parameters(), *head.named_parameters()]:
                p.grad = direction[name].clone()  # a constant gradient
            opt_body.step()
            taken["body"] += 1
            if (step + rank) % 5 != 0:  # this rank skips some of the head's steps on its own
                opt_head.step()
                taken["head"] += 1
            if step % 10 == 0:
                # One name for every call, as scripts name a metric: Horovod 0.28.1 corrupts a
                # joined rank's heap when the others all-reduce a name it has not seen
                # (docs/limitations.md).
                hvd.allreduce(torch.tensor(float(step)), name="metric")
        hvd.join()
        after_join.append(digest([*body.state_dict().values(), *head.state_dict().values()]))
    report(
        {
            "taken": taken,
            "forwards": forwards,
            "after_join": after_join,
            "params": {
                name: p.detach().tolist()
                for name, p in [*body.named_parameters(), *head.named_parameters()]
            },
            "start": {
                name: start[name].tolist()
                for name, _ in [*body.named_parameters(), *head.named_parameters()]
            },
            "direction": {name: d.tolist() for name, d in direction.items()},
            "num_batches_tracked": int(body[1].num_batches_tracked),
            "lr": LR,
            "size": size,
        }
    )


if __name__ == "__main__":
    main(int(sys.argv[1]))
