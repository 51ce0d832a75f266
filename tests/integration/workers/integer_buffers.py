"""A plain Horovod PyTorch script whose model has integer buffers, for ``--prague``.

    integer_buffers.py STEPS

BatchNorm1d(momentum=None), whose running statistics are a cumulative average weighted by
its ``num_batches_tracked``, and a counter buffer that every forward pass increments. After
STEPS steps and ``hvd.shutdown()`` (Prague's final world average), each rank reports both
counts, the running statistics and a digest of the whole state.
"""

import sys

import horovod.torch as hvd
import torch
from _report import digest, report


class Counted(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.norm = torch.nn.BatchNorm1d(4, momentum=None)
        self.register_buffer("forwards", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.forwards += 1
        return self.norm(self.linear(x))


steps = int(sys.argv[1])
hvd.init()
torch.manual_seed(hvd.rank())
model = Counted()
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.05), named_parameters=model.named_parameters()
)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
for _ in range(steps):
    x = torch.randn(16, 4) + hvd.rank()
    loss = (model(x) - x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
hvd.shutdown()
state = model.state_dict()
report(
    {
        "forwards": int(model.forwards),
        "num_batches_tracked": int(model.norm.num_batches_tracked),
        "running": [*model.norm.running_mean.tolist(), *model.norm.running_var.tolist()],
        "digest": digest(state.values()),
    }
)
