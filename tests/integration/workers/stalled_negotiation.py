"""A rank whose process stops (SIGSTOP) stalls Horovod's negotiation on the others.

Stock Horovod, PyTorch, 3 ranks. The ranks start Horovod together (each waits for the others'
files first, so that the test's Gloo timeout only times the stall). After a few
all-reduces the last rank stops itself; the others' background loops then wait in their next
negotiation of the global set until Gloo's timeout ends them. Each other rank reports the
error its next all-reduce raised; the test reads the loop's message.
"""

import os
import signal
import time
from pathlib import Path

import horovod.torch as hvd
import torch
from _report import launcher_rank, report

out = Path(os.environ["PRAGUE_TEST_OUT"])
size = int(os.environ["HOROVOD_SIZE"])
(out / f"started{launcher_rank()}").write_text("")
deadline = time.monotonic() + 60
while not all((out / f"started{r}").exists() for r in range(size)):
    assert time.monotonic() < deadline, "the other ranks did not start"
    time.sleep(0.05)

hvd.init()
for step in range(3):
    hvd.allreduce(torch.ones(1), name=f"warm{step}")
if hvd.rank() == hvd.size() - 1:
    os.kill(os.getpid(), signal.SIGSTOP)
try:
    hvd.allreduce(torch.ones(1), name="after.stop")
    outcome = {"error": None}
except Exception as e:  # noqa: BLE001  (the test inspects whatever was raised)
    outcome = {"error": type(e).__name__, "message": str(e)}
report(outcome, rank=hvd.rank())
os._exit(1)  # Horovod's shutdown would wait for the stopped rank
