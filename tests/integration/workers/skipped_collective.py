"""A plain Horovod script whose rank 3 skips one unnamed collective.

    skipped_collective.py

Written as users write scripts: ``import horovod.torch as hvd``, unnamed collectives. Ranks
train a few steps with random slowdowns, so that under ``--prague`` their group histories
diverge (and so would Horovod's own names for unnamed collectives), gathering the loss
unnamed every few steps. Then ranks 0-2 gather once more and rank 3 skips it: every rank must
end with an error that names its collective and the ranks that did not reach it, within the
timeout. Each rank reports the error it met and how long after the skip.
"""

from __future__ import annotations

import random
import time

import horovod.torch as hvd
import torch
from _report import report

hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters()
)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
slow = random.Random(hvd.rank())
gathered = 0
for step in range(24):
    time.sleep(0.01 * (5 if slow.random() < 0.25 else 1))
    optimizer.zero_grad()
    loss = model(torch.randn(4, 8)).pow(2).mean()
    loss.backward()
    optimizer.step()
    if step % 8 == 7:
        losses = hvd.allgather(loss.detach().reshape(1))
        assert losses.shape == (hvd.size(),), losses.shape
        gathered += 1

began = time.monotonic()
try:
    if hvd.rank() != 3:
        hvd.allgather(torch.ones(1))
    hvd.allreduce(torch.ones(1))
    report({"error": None, "gathered": gathered})
except Exception as e:
    after = time.monotonic() - began
    report({"error": type(e).__name__, "message": str(e), "after": after, "gathered": gathered})
    raise
