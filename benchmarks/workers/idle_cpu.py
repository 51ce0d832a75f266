"""CPU an idle rank spends, Horovod's background loop included (run by benchmarks/idle_cpu.py).

After one all-reduce, every rank sleeps SECONDS in its main thread; its process's CPU time over
that sleep, in cores, is gathered. Rank 0 prints one JSON line.
"""

from __future__ import annotations

import json
import os
import resource
import time

import horovod.torch as hvd
import torch

SECONDS = float(os.environ.get("SECONDS_IDLE", "5"))


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


hvd.init()
hvd.allreduce(torch.zeros(1), name="before_idle")
cpu, wall = cpu_seconds(), time.monotonic()
time.sleep(SECONDS)
cores = (cpu_seconds() - cpu) / (time.monotonic() - wall)
every_rank = hvd.allgather_object(cores, name="idle_cores")
if hvd.rank() == 0:
    print("BENCH " + json.dumps({"cores": every_rank}), flush=True)
