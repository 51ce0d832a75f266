"""Rank 3 sleeps before every step; every rank reports its step rate over the first half."""

import sys
import time

import torch
from _report import report

import horovod_prague.torch as hvd

strategy, steps, straggler_sleep = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
hvd.init(strategy=strategy, group_size=4 if strategy == "allreduce" else 2, threshold=3)
r = hvd.rank()
model = torch.nn.Linear(32, 32)
stamps = []
for _ in range(steps):
    if r == 3:
        time.sleep(straggler_sleep)  # the slow worker's extra compute
    time.sleep(0.005)  # everyone's compute
    hvd.partial_allreduce(model.parameters(), hvd.next_group())
    stamps.append(time.perf_counter())
half = steps // 2
hvd.finish(model)
report({"rate": (half - 1) / (stamps[half - 1] - stamps[0])})
hvd.shutdown()
