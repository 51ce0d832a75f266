"""A rank whose process stops (SIGSTOP) stalls Horovod's negotiation on the others.

Stock Horovod, PyTorch, with a process set of ranks 0 and 1 besides the global one. After a
first all-reduce on each, the last rank stops itself; the others' background loops then wait
in their next negotiation until Gloo's timeout (the test gives 3 s) ends them. Each other
rank reports the error its next all-reduce raised; the test reads the loop's message.
"""

import os
import signal

import horovod.torch as hvd
import torch
from _report import report

pair = hvd.ProcessSet([0, 1])
hvd.init(process_sets=[pair])
hvd.allreduce(torch.ones(1), name="warm.global")
if hvd.rank() in (0, 1):
    hvd.allreduce(torch.ones(1), name="warm.pair", process_set=pair)
hvd.allreduce(torch.ones(1), name="warm.done")
if hvd.rank() == hvd.size() - 1:
    os.kill(os.getpid(), signal.SIGSTOP)
try:
    hvd.allreduce(torch.ones(1), name="after.stop")
    outcome = {"error": None}
except Exception as e:  # noqa: BLE001  (the test inspects whatever was raised)
    outcome = {"error": type(e).__name__, "message": str(e)}
report(outcome, rank=hvd.rank())
os._exit(1)  # Horovod's shutdown would wait for the stopped rank
