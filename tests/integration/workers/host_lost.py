"""Training across hosts until one host is lost; every rank that still runs reports its error.

A plain Horovod PyTorch loop under ``--prague`` (the test gives random groups and a short
Prague timeout), a few milliseconds of work a step. Each rank writes ``ready{rank}`` to the
report folder at step ``READY_AT`` and trains on; the test then takes a host away (its link
down, or its processes killed). A rank that still runs reports the error it got (type,
message) and the seconds from the fault (``fault_at`` in the report folder, written by the
test) to its error.
"""

import os
import time
from pathlib import Path

import horovod.torch as hvd
import torch
from _report import report, wait_for_reports

READY_AT, STEPS = 20, 100_000

hvd.init()
out = Path(os.environ["PRAGUE_TEST_OUT"])
torch.manual_seed(hvd.rank())
model = torch.nn.Linear(32, 4)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.01), named_parameters=model.named_parameters()
)

try:
    for step in range(STEPS):
        if step == READY_AT:
            (out / f"ready{hvd.rank()}").write_text("")
        optimizer.zero_grad()
        model(torch.randn(16, 32)).square().mean().backward()
        optimizer.step()
        time.sleep(0.005)
    outcome = {"error": None}
except Exception as e:  # noqa: BLE001  (the test inspects whatever was raised)
    fault = out / "fault_at"
    after = time.time() - float(fault.read_text()) if fault.exists() else None
    outcome = {"error": type(e).__name__, "message": str(e), "after": after}
report(outcome, rank=hvd.rank())
# Rank 0's process also serves the Group Generator, which the others on its host ask who is
# gone: each rank stays until its host's ranks have reported (at most 30 s).
first = hvd.rank() - hvd.local_rank()
wait_for_reports(range(first, first + hvd.local_size()), 30)
os._exit(1)  # Horovod's shutdown would wait for ranks that are gone
