"""Horovod's ``add_process_sets`` (``patches/0022``): every pair of ranks added in one call, each
set's all-reduce run by its members; then a batch of a new set and one that exists already,
which must add neither."""

from __future__ import annotations

import itertools
import os

import horovod.torch as hvd
import torch
from _report import report
from horovod.torch.mpi_ops import _basics

os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
hvd.init(process_sets="dynamic")
pairs = [list(pair) for pair in itertools.combinations(range(hvd.size()), 2)]
sets = hvd.add_process_sets(pairs)
means = {}
for ps in sets:
    if hvd.rank() in ps.ranks:
        mine = torch.tensor([float(hvd.rank())])
        mean = hvd.allreduce(mine, name=f"pair.{ps.process_set_id}", process_set=ps)
        means[str(ps.ranks)] = mean.item()
try:
    hvd.add_process_sets([[0, 1, 2], [0, 1]])
    refused = ""
except ValueError as e:
    refused = str(e)
table = sorted(_basics._get_process_set_ids_and_ranks().values())
# A rank that shuts down stops every rank's Horovod: wait until all pairs are done.
hvd.barrier()
report({"sets": [s.ranks for s in sets], "means": means, "refused": refused, "table": table})
hvd.shutdown()
