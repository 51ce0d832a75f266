"""A small plain Horovod PyTorch training script that records, from Horovod's side, whom each
of its group averages met.

    meetings.py STEPS

Every grouped all-reduce goes through ``horovod.torch.mpi_ops._grouped_allreduce_async``; a
wrapper there (outside Prague) notes the ranks of the process set it runs on. Each rank
reports those lists, in order, with the host it ran on and its final parameters' hash.
"""

from __future__ import annotations

import atexit
import socket
import sys

import horovod.torch as hvd
import horovod.torch.mpi_ops as ops
import torch
from _report import digest, report

run_on_process_set = ops._grouped_allreduce_async
met: list[list[int]] = []


def recording(tensors, outputs, name, op, prescale, postscale, process_set):
    if process_set.ranks is not None:
        met.append(list(process_set.ranks))
    return run_on_process_set(tensors, outputs, name, op, prescale, postscale, process_set)


ops._grouped_allreduce_async = recording
model = torch.nn.Linear(16, 4)


def finish() -> None:
    report({"met": met, "host": socket.gethostname(), "final": digest(model.parameters())})


atexit.register(finish)
hvd.init()
torch.manual_seed(hvd.rank())
opt = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters()
)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
for _ in range(int(sys.argv[1])):
    opt.zero_grad()
    x = torch.randn(8, 16)
    torch.nn.functional.mse_loss(model(x), torch.zeros(8, 4)).backward()
    opt.step()
hvd.allreduce(torch.tensor(0.0), name="done")
