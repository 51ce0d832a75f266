"""Look for stalls of whole Horovod jobs: plain Horovod, no horovod-prague code.

    cd benchmarks/workers
    horovodrun -np 4 -H localhost:4 --gloo ../../.venv/bin/python stall_probe.py
    MODE=global horovodrun -np 4 -H localhost:4 --gloo ../../.venv/bin/python stall_probe.py

MODE=sets (default): every rank is in two pair sets, {0,1},{2,3} and {0,2},{1,3}, given to
hvd.init, and allreduces on them in turn for 12 s. MODE=global: the same loop on the global
set with no extra sets. Each rank prints its step count and every op that took over 0.5 s.
"""

import os
import time

import horovod.torch as hvd
import torch

mode = os.environ.get("MODE", "sets")
divisions = [[(0, 1), (2, 3)], [(0, 2), (1, 3)]]
sets = {g: hvd.ProcessSet(list(g)) for d in divisions for g in d} if mode == "sets" else {}
hvd.init(process_sets=list(sets.values()))
rank = hvd.rank()
x = torch.ones(32 * 33)
hvd.barrier()
start = time.perf_counter()
stalls, steps = [], 0
while time.perf_counter() - start < 12:
    time.sleep(0.005)
    t0 = time.perf_counter()
    if mode == "sets":
        group = next(g for g in divisions[steps % 2] if rank in g)
        hvd.allreduce_(x, name=f"p{group}", op=hvd.Average, process_set=sets[group])
    else:
        hvd.allreduce_(x, name="g", op=hvd.Average)
    t1 = time.perf_counter()
    steps += 1
    if t1 - t0 > 0.5:
        stalls.append(f"{t0 - start:.2f}-{t1 - start:.2f}s")
print(f"rank {rank} mode={mode}: {steps} steps; ops over 0.5 s: {stalls}", flush=True)
