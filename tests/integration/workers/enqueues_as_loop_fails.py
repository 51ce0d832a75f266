"""Stock Horovod PyTorch, 2 ranks: collectives enqueued as the background loop fails still end.

On each rank, ``THREADS`` threads enqueue grouped all-reduces of many small tensors back to
back, without waiting, so that enqueues are under way, and wait on each other's lock, most
of the time. Rank 1 leaves without a word after ``LEAVE_AFTER`` of them; rank 0's loop then
fails on the closed connection and shuts down while its enqueues go on. An enqueue that had
checked for the shutdown before the loop finalized its queue, and added its tensors after,
was kept by stock Horovod and never ran: its handle never completed; and stock Horovod's loop
released the finalized tensors holding the lock that an enqueuing thread, holding the GIL
that the release needs, waited for: rank 0 hung (``patches/0025``). Rank 0 reports how each
thread's enqueues ended and how many of its handles had not completed 10 s after the last;
a rank still running ``LIMIT_S + 20`` seconds after its start prints every thread's stack
and exits.
"""

import faulthandler
import os
import threading
import time

import horovod.torch as hvd
import torch
from _report import report

THREADS = 4
TENSORS = 64
LEAVE_AFTER = 400
LIMIT_S = 60.0

faulthandler.dump_traceback_later(LIMIT_S + 20, exit=True)  # a hang shows where
hvd.init()
handles: list[list[int]] = [[] for _ in range(THREADS)]
refused: list[str] = []


def enqueue(thread: int) -> None:
    values = [torch.ones(1) for _ in range(TENSORS)]
    mine = handles[thread]
    started = time.monotonic()
    while time.monotonic() - started < LIMIT_S:
        try:
            mine.append(hvd.grouped_allreduce_async(values, name=f"t{thread}.{len(mine)}"))
        except Exception as e:  # noqa: BLE001  (how the enqueues ended is the report)
            refused.append(f"{type(e).__name__}: {e}")
            return


threads = [threading.Thread(target=enqueue, args=(t,), daemon=True) for t in range(THREADS)]
for t in threads:
    t.start()
if hvd.rank() == 1:
    while sum(map(len, handles)) < LEAVE_AFTER:
        time.sleep(0.001)
    os._exit(0)
for t in threads:
    t.join()
every = [h for mine in handles for h in mine]
deadline = time.monotonic() + 10.0
while time.monotonic() < deadline and not all(hvd.poll(h) for h in every):
    time.sleep(0.05)
report(
    {
        "enqueued": len(every),
        "refused": refused,
        "unfinished": sum(not hvd.poll(h) for h in every),
    }
)
