"""What an elastic reset's Horovod work costs, without the fault (run by
benchmarks/reset_cost.py).

Each of ROUNDS rounds, as Prague's reset under elastic does: ``hvd.init`` with dynamic
process sets, a set added for every pair of ranks, in one order on every rank (in one
``add_process_sets`` call where the build has it, ``patches/0022``, as Prague's pool does),
one small all-reduce on the global set, then ``hvd.shutdown``. Rank 0 prints one JSON line
with each phase's median seconds over the rounds (the first round left out), the slowest
rank's, and the same for the sets and the all-reduce together (``sets_to_allreduce``: a rank
whose sets are done early waits for the others in the all-reduce).
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import time

import horovod.torch as hvd
import torch

os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
rounds = int(os.environ.get("ROUNDS", "10"))
times: dict[str, list[float]] = {
    "init": [],
    "sets": [],
    "allreduce": [],
    "shutdown": [],
    "sets_to_allreduce": [],
}
for _ in range(rounds):
    t0 = time.perf_counter()
    hvd.init(process_sets="dynamic")
    t1 = time.perf_counter()
    pairs = [list(pair) for pair in itertools.combinations(range(hvd.size()), 2)]
    if hasattr(hvd, "add_process_sets"):
        hvd.add_process_sets(pairs)
    else:
        for pair in pairs:
            hvd.add_process_set(pair)
    t2 = time.perf_counter()
    hvd.allreduce(torch.ones(1), name="reset_cost")
    t3 = time.perf_counter()
    hvd.shutdown()
    t4 = time.perf_counter()
    phases = (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t3 - t1)
    for key, seconds in zip(times, phases, strict=True):
        times[key].append(seconds)
hvd.init()
medians = {key: statistics.median(values[1:]) for key, values in times.items()}
everyone = hvd.allgather_object(medians)
slowest = {key: max(m[key] for m in everyone) for key in medians}
if hvd.rank() == 0:
    print("BENCH " + json.dumps(slowest), flush=True)
hvd.shutdown()
