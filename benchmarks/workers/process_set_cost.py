"""What each extra process set a rank belongs to costs (run by benchmarks/process_set_cost.py).

Registers SETS divisions of the ranks into pairs (each rank is in SETS pair sets), given to
hvd.init (MODE=static) or added after init with dynamic process sets (MODE=dynamic), then times
1-float and 1M-float allreduces on the global set and on one of the rank's pair sets.
Rank 0 prints one JSON line.
"""

from __future__ import annotations

import json
import os

import horovod.torch as hvd
import torch
from _pairs import pair_divisions
from _timing import slowest_median

mode = os.environ.get("MODE", "static")
n_divisions = int(os.environ.get("SETS", "0"))
size = int(os.environ.get("HOROVOD_SIZE") or os.environ["OMPI_COMM_WORLD_SIZE"])
pairs = pair_divisions(size, n_divisions)
if mode == "static":
    sets = [hvd.ProcessSet(list(p)) for p in pairs]
    hvd.init(process_sets=sets)
else:
    os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
    hvd.init()
    sets = [hvd.add_process_set(list(p)) for p in pairs]
torch.set_num_threads(1)
rank = hvd.rank()
mine = next((s for p, s in zip(pairs, sets, strict=True) if rank in p), None)


def median_ms(fn, reps):
    return 1e3 * slowest_median(hvd, fn, reps, "cost")


small, big = torch.ones(1), torch.ones(1_000_000)
result = {
    "mode": mode,
    "ranks": size,
    "sets_per_rank": n_divisions,
    "global_1": median_ms(lambda: hvd.allreduce_(small, name="g1"), 30),
    "global_1M": median_ms(lambda: hvd.allreduce_(big, name="g1m"), 8),
}
if mine is not None:
    result["pair_1"] = median_ms(lambda: hvd.allreduce_(small, name="p1", process_set=mine), 30)
    result["pair_1M"] = median_ms(lambda: hvd.allreduce_(big, name="p1m", process_set=mine), 8)
if rank == 0:
    print("BENCH " + json.dumps(result), flush=True)
hvd.shutdown()
