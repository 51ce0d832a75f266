"""Global collectives of a stock Horovod PyTorch job whose ranks also belong to pair process
sets, waiting with Horovod's ``synchronize`` (``spin``) or with Prague's (``sleep``).

    horovodrun -np 4 --gloo python spin_stalls.py {spin,sleep} {0,1} [rounds]

The second argument registers every pair of ranks as a process set at ``init`` (1) or none
(0). Rank 0 prints ``BENCH {json}``: per collective, the median and the slowest of ``rounds``.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import sys
import time

import horovod.torch as hvd
import torch

wait, pairs = sys.argv[1], sys.argv[2] == "1"
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 40
if wait == "sleep":
    import horovod_prague.torch  # noqa: F401  (Horovod's modules then wait with Prague's synchronize)

size = int(os.environ["HOROVOD_SIZE"])
groups = itertools.combinations(range(size), 2) if pairs else ()
hvd.init(process_sets=[hvd.ProcessSet(list(g)) for g in groups])
model = torch.nn.Sequential(
    torch.nn.Linear(40, 256), torch.nn.Linear(256, 256), torch.nn.Linear(256, 10)
)
seconds: dict[str, list[float]] = {"broadcast_parameters": [], "allgather_object": []}
for r in range(rounds):
    began = time.monotonic()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    seconds["broadcast_parameters"].append(time.monotonic() - began)
    began = time.monotonic()
    hvd.allgather_object((r, "x" * 100))
    seconds["allgather_object"].append(time.monotonic() - began)
if hvd.rank() == 0:
    summary = {k: [statistics.median(v), max(v), sum(v)] for k, v in seconds.items()}
    print("BENCH " + json.dumps(summary), flush=True)
