"""A plain Horovod PyTorch script, run under ``--prague``, that calls ``hvd.init()`` again.

A second ``init`` with the same options (library code often calls it), then one with another
option, trains, shuts down, initializes again after ``shutdown`` and trains on. Reports the
error of the differing call and a digest of the model after each ``shutdown``.
"""

import horovod.torch as hvd
import torch
from _report import digest, report


def train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> None:
    for _ in range(steps):
        x = torch.randn(16, 4)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


hvd.init()
hvd.init()
torch.manual_seed(hvd.rank())
model = torch.nn.Linear(4, 1)
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.05), named_parameters=model.named_parameters()
)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
train(model, optimizer, 8)
try:
    hvd.init(sync_every=5)
    refused = None
except ValueError as e:
    refused = str(e)
train(model, optimizer, 4)
hvd.shutdown()
after_first = digest(model.parameters())
hvd.init()
hvd.init()
train(model, optimizer, 8)
hvd.shutdown()
report(
    {
        "drop_in": hasattr(hvd.init, "__prague_target__"),
        "refused": refused,
        "after_first": after_first,
        "after_second": digest(model.parameters()),
    }
)
