"""Two phases of PHASE seconds in one job: all ranks equal, then rank 3 sleeps before every
step. Each rank reports its step rate in the second half of each phase (the steady state),
as 1 / the median time between its steps: Horovod jobs with process sets on this machine
show rare stalls of about a second on all ranks at once (docs/design.md), which a mean would
count and a median does not."""

import statistics
import sys
import time

import torch
from _report import report

import horovod_prague.torch as hvd

strategy, phase, straggler_sleep = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
hvd.init(strategy=strategy, group_size=4 if strategy == "allreduce" else 2)
r = hvd.rank()
model = torch.nn.Linear(32, 32)
stamps = []
hvd.barrier()
start = time.perf_counter()
while (now := time.perf_counter() - start) < 2 * phase:
    if r == 3 and now >= phase:
        time.sleep(straggler_sleep)  # the slow worker's extra compute
    time.sleep(0.005)  # everyone's compute
    hvd.partial_allreduce(model.parameters(), hvd.next_group())
    stamps.append(time.perf_counter() - start)
hvd.finish(model)


def rate(lo, hi):
    window = [s for s in stamps if lo <= s < hi]
    if len(window) < 3:
        return 0.0
    return 1 / statistics.median(b - a for a, b in zip(window[:-1], window[1:], strict=True))


report({"calm": rate(phase / 2, phase), "straggling": rate(1.5 * phase, 2 * phase)})
hvd.shutdown()
