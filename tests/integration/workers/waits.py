"""A plain Horovod PyTorch script whose rank 0 waits in each kind of collective for rank 1,
which is late by ``LATE`` seconds each time: an all-reduce (``horovod.torch.mpi_ops``), an
asynchronous broadcast and ``hvd.synchronize``, ``broadcast_parameters`` and
``allgather_object`` (``horovod.torch.functions``). Reports, per wait, rank 0's wall time and
the CPU time of its main thread, and whether the results are right.
"""

import time

import horovod.torch as hvd
import torch
from _report import report

LATE = 1.5

hvd.init()
model = torch.nn.Linear(3, 2)
with torch.no_grad():
    for p in model.parameters():
        p.fill_(hvd.rank())


def waited(collective):
    """Run ``collective`` after rank 1 was late; (wall s, main thread's CPU s, its result)."""
    if hvd.rank() == 1:
        time.sleep(LATE)  # the late rank: what the others wait for
    wall, cpu = time.monotonic(), time.thread_time()
    result = collective()
    return time.monotonic() - wall, time.thread_time() - cpu, result


waits = {
    "allreduce": waited(lambda: hvd.allreduce(torch.ones(2), op=hvd.Sum, name="w.sum").tolist()),
    "synchronize": waited(
        lambda: hvd.synchronize(hvd.broadcast_async(torch.full((2,), 1.0 + hvd.rank()), 1)).tolist()
    ),
    "broadcast_parameters": waited(
        lambda: hvd.broadcast_parameters(model.state_dict(), root_rank=1)
    ),
    "allgather_object": waited(lambda: hvd.allgather_object(hvd.rank())),
}
right = (
    waits["allreduce"][2] == [2.0, 2.0]
    and waits["synchronize"][2] == [2.0, 2.0]
    and all(bool((p == 1).all()) for p in model.parameters())
    and waits["allgather_object"][2] == [0, 1]
)
report(
    {
        "rank": hvd.rank(),
        "right": right,
        "waits": {name: [wall, cpu] for name, (wall, cpu, _) in waits.items()},
    }
)
