"""``hvd.init`` with Horovod's own ``process_sets`` argument, then a few Prague steps.

argv[1]: ``dynamic`` (Horovod's dynamic process sets) or ``user-set`` (the user registers a
set with the ranks of a Prague group, and uses it). Reports the groups taken and whether
every rank ended with the same values.
"""

import sys

import horovod.torch as raw
import torch
from _report import report

import horovod_prague.torch as hvd

variant = sys.argv[1]
if variant == "dynamic":
    hvd.init(process_sets="dynamic", strategy="random", staleness=0, timeout=20)
    mine = None
else:
    mine = hvd.ProcessSet([0, 1])
    hvd.init(process_sets=[mine], strategy="static", staleness=0, timeout=20)
weights = torch.full((8,), float(hvd.rank()))
groups = []
for _ in range(6):
    weights.add_(1.0)
    groups.append(hvd.exchange([weights]))
own_sum = None
if mine is not None and hvd.rank() in (0, 1):
    own_sum = hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum, process_set=mine).item()
hvd.finish([weights])
gathered = raw.allgather_object(weights.clone())
report(
    {
        "groups": [list(g) for g in groups],
        "own_sum": own_sum,
        "same": all(torch.equal(gathered[0], g) for g in gathered),
    }
)
hvd.shutdown()
