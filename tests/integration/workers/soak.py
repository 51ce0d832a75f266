"""Many steps with random per-rank delays and uneven step counts; logs every group run.

``soak.py STRATEGY STEPS even|uneven [STALENESS]``: each step is ``hvd.exchange``; with
STALENESS > 0 its group average is overlapped (and some steps take no group).
"""

import random
import sys
import time

import torch
from _report import digest, report

import horovod_prague.torch as hvd
from horovod_prague.common.strategies import Group

strategy, steps, uneven = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "uneven"
staleness = int(sys.argv[4]) if len(sys.argv) > 4 else 0
hvd.init(strategy=strategy, group_size=2, seed=11, staleness=staleness)
r = hvd.rank()
rng = random.Random(100 + r)
my_steps = steps - (37 * r if uneven else 0)
model = torch.nn.Linear(8, 4)
torch.manual_seed(r)
for p in model.parameters():
    p.data.normal_()
executed: list[Group] = []


def logging(original):
    def logged(first, group, **options):
        executed.append(list(group))
        return original(first, group, **options)

    return logged


# See every group run: blocking ones (owed groups, syncs, staleness 0) and overlapped ones.
binding = hvd._binding
binding._average_group = logging(binding._average_group)
if binding.job.averager is not None:
    binding.job.averager.start = logging(binding.job.averager.start)
for step in range(1, my_steps + 1):
    time.sleep(rng.uniform(0, 0.004))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * (r + 1))
    hvd.exchange(model.parameters())
    if not uneven and step % 100 == 0:
        assert hvd.average_model(model)
hvd.finish(model)
report(
    {
        "steps": my_steps,
        "executed": [g for g in executed if len(g) > 1],
        "digest": digest(model.parameters()),
    }
)
hvd.shutdown()
