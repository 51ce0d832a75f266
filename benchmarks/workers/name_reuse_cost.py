"""What a fresh collective name per average costs against a reused one (run by
benchmarks/name_reuse_cost.py).

Each rank is in SETS pair sets, given to ``hvd.init`` as horovod-prague does, and averages
1 float and 1M floats (4 MB) with its partner in one of them, interleaved: under one name
reused every time (Horovod's response cache can serve it after the first) and under a new
name each time (``.n{k}``, as P-Reduce names its averages: every one negotiated). Rank 0
prints one JSON line: the slowest rank's median, ms.
"""

from __future__ import annotations

import itertools
import json
import os

import horovod.torch as hvd
import torch
from _pairs import pair_divisions
from _timing import interleaved_medians

n_divisions = int(os.environ.get("SETS", "3"))
reps = int(os.environ.get("REPS", "60"))
size = int(os.environ["HOROVOD_SIZE"])
pairs = pair_divisions(size, n_divisions)
sets = [hvd.ProcessSet(list(p)) for p in pairs]
hvd.init(process_sets=sets)
torch.set_num_threads(1)
rank = hvd.rank()
mine = next(s for p, s in zip(pairs, sets, strict=True) if rank in p)
small, big = torch.ones(1), torch.ones(1_000_000)
fresh = itertools.count()


def average(t: torch.Tensor, name: str) -> None:
    hvd.allreduce_(t, name=name, op=hvd.Average, process_set=mine)


result = interleaved_medians(
    hvd,
    {
        "reused_1": lambda: average(small, "r1"),
        "fresh_1": lambda: average(small, f"f1.n{next(fresh)}"),
        "reused_1M": lambda: average(big, "r1m"),
        "fresh_1M": lambda: average(big, f"f1m.n{next(fresh)}"),
    },
    reps,
    "cost",
)
if rank == 0:
    print("BENCH " + json.dumps({"ranks": size, **{k: 1e3 * v for k, v in result.items()}}))
hvd.shutdown()
