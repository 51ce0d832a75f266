"""A plain Horovod PyTorch script whose model has integer buffers, for ``--prague``.

    integer_buffers.py STEPS

BatchNorm1d(momentum=None), whose running statistics are a cumulative average weighted by
its ``num_batches_tracked``, and a counter buffer that every forward pass increments. After
STEPS steps and ``hvd.shutdown()`` (Prague's final world average), each rank reports both
counts, the running statistics and a digest of the whole state.

Two int64 buffers whose sums over the ranks overflow int64: ``equal``, the same on every
rank, and ``large``, different on each (set after the broadcast), both reported at the start
and the end: averages must leave ``equal`` as it is and give every rank ``large``'s exact
floor mean in the end.
"""

import sys

import horovod.torch as hvd
import torch
from _report import digest, report

EQUAL = [2**62, 2**63 - 1, 7, -(2**63)]


def large(rank: int) -> list[int]:
    """Int64 values near the ends of the range, different on each rank."""
    return [2**63 - 1 - 3 * rank, -(2**63) + 5 * rank, 2**62 + rank * 2**55, -rank]


class Counted(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.norm = torch.nn.BatchNorm1d(4, momentum=None)
        self.register_buffer("forwards", torch.zeros((), dtype=torch.int64))
        self.register_buffer("equal", torch.tensor(EQUAL, dtype=torch.int64))
        self.register_buffer("large", torch.zeros(4, dtype=torch.int64))

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
model.large.copy_(torch.tensor(large(hvd.rank())))
start = {"equal_start": model.equal.tolist(), "large_start": model.large.tolist()}
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
        **start,
        "equal": model.equal.tolist(),
        "large": model.large.tolist(),
        "digest": digest(state.values()),
    }
)
