"""Starts of Horovod under ``--prague``, many in one process, as a soak for the rare all-ranks
Gloo time-out at a job's start (docs/limitations.md): ``restarts.py ROUNDS [dynamic]``.

Each round initializes Horovod (with Horovod's dynamic process sets when ``dynamic`` is
given, so that Prague adds its sets after ``init``, as under elastic), broadcasts a fresh
model, takes 4 Prague steps and shuts Horovod down. A failure ends the job with every
rank's Horovod loop naming where it waited (``patches/0016``, ``patches/0017``); every
rank reports the rounds done.
"""

import sys
import time

import horovod.torch as hvd
import torch
from _report import report

rounds = int(sys.argv[1])
init_options = {"process_sets": "dynamic"} if sys.argv[2:] == ["dynamic"] else {}
started = time.monotonic()
for round_ in range(rounds):
    hvd.init(**init_options)
    torch.manual_seed(hvd.rank() + round_)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.05), named_parameters=model.named_parameters()
    )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for _ in range(4):
        x = torch.randn(16, 8)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    hvd.shutdown()
print(f"{rounds} starts in {time.monotonic() - started:.1f} s", flush=True)
report({"rounds": rounds, "seconds": time.monotonic() - started})
