"""Plain Horovod: an allreduce on non-global process sets {0,1} and {2,3} (set-up check)."""

import horovod.torch as hvd
import torch
from _report import report

pairs = [hvd.ProcessSet([0, 1]), hvd.ProcessSet([2, 3])]
hvd.init(process_sets=pairs)
hvd.barrier()  # a global op first: every rank's background loop is running
mine = pairs[0] if hvd.rank() < 2 else pairs[1]
summed = hvd.allreduce(
    torch.tensor([hvd.rank() + 1, 10 * (hvd.rank() + 1)]), op=hvd.Sum, process_set=mine, name="sum"
)
averaged = hvd.allreduce(
    torch.full((3,), float(hvd.rank())), op=hvd.Average, process_set=mine, name="avg"
)
hvd.barrier()  # Horovod's shutdown is global: fail nobody's pending op on the other set
report(
    {
        "size": hvd.size(),
        "summed": summed.tolist(),
        "averaged": averaged.tolist(),
        "set_ranks": mine.ranks,
    }
)
hvd.shutdown()
