"""Uneven epochs that all-reduce metrics and end with ``hvd.join()``, with no optimizer: the
shape of an evaluation or data-statistics script.

Rank r takes 60 + 5 * r * (epoch + 1) steps per epoch, each an all-reduce of a small tensor
under one name, and every 10 steps a "metric" all-reduce: under one name for every metric
(``fixed``), or a new name each time (``new``). Each epoch ends with ``hvd.join()``. Every
rank reports the ranks ``join`` returned and the last metric.
"""

import sys

import horovod.torch as hvd
import torch
from _report import report

metric_names = sys.argv[1]
hvd.init()
torch.set_num_threads(1)
joined = []
for epoch in range(2):
    for step in range(60 + 5 * hvd.rank() * (epoch + 1)):
        hvd.allreduce(torch.ones(16), name="activity")
        if step % 10 == 0:
            name = "metric" if metric_names == "fixed" else f"metric.{epoch}.{step}"
            metric = hvd.allreduce(torch.tensor(float(step)), name=name, op=hvd.Sum)
    joined.append(int(hvd.join()))
report({"joined": joined, "metric": float(metric)})
