"""Stock Horovod 0.28.1 (no Prague): a joined rank aborts with heap corruption when the
other ranks all-reduce a tensor under a name not seen before.

    horovodrun -np 8 -H localhost:8 --gloo python scripts/repro/horovod_join_new_names.py
    horovodrun -np 8 -H localhost:8 --gloo python scripts/repro/horovod_join_new_names.py same

Uneven step counts (100 + 7 x rank), one all-reduce per step under a fixed name, a "metric"
every 10 steps, hvd.join() at the end of each of two epochs. With a new metric name each time
rank 0, which joins first, aborts: "free(): invalid next size (fast)". With one name for
every metric (``same``) the job ends cleanly.
"""

import sys

import horovod.torch as hvd
import torch

same_name = len(sys.argv) > 1 and sys.argv[1] == "same"
hvd.init()
torch.set_num_threads(1)
for epoch in range(2):
    for step in range(100 + 7 * hvd.rank() * (epoch + 1)):
        hvd.allreduce(torch.ones(16), name="gradient")
        if step % 10 == 0:
            name = "metric" if same_name else f"metric.{epoch}.{step}"
            hvd.allreduce(torch.tensor(float(step)), name=name)
    hvd.join()
print(f"rank {hvd.rank()} done", flush=True)
