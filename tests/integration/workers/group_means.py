"""Each step: ask for a group and P-Reduce three tensors; every group run is logged with the
values before and after (groups run inside finish() too)."""

import sys

import torch
from _report import report

import horovod_prague.torch as hvd

strategy, steps = sys.argv[1], int(sys.argv[2])
hvd.init(strategy=strategy, group_size=4 if strategy == "allreduce" else 2, seed=3)
r = hvd.rank()
gen = torch.Generator().manual_seed(r)
tensors = [
    torch.randint(-512, 512, shape, generator=gen).double() / 8 for shape in [(5,), (2, 3), (1,)]
]
log = []
original = hvd._binding._average_group


def logged(values, group, **options):
    before = [t.tolist() for t in values]
    original(values, group, **options)
    log.append({"group": list(group), "before": before, "after": [t.tolist() for t in values]})


# Every group average goes through here: this script's own and the groups finish() runs.
hvd._binding._average_group = logged
for _ in range(steps):
    hvd.partial_allreduce(tensors, hvd.next_group())
    for t in tensors:  # a local "step" that keeps values distinct between ranks
        t.add_(r)
hvd.finish(tensors)
report({"log": log, "final": [t.tolist() for t in tensors]})
hvd.shutdown()
