"""A plain Horovod script with process sets of its own, run stock or under ``--prague``.

argv[1]: ``dynamic``, ``hvd.init(process_sets="dynamic")``, then mid-training the sets
``[0, 1]``, ``[2, 3]``, ``[0, 1, 2]`` and the whole world are added, the pairs used, and
``[0, 1]`` and ``[0, 1, 2]`` removed (and ``[0, 1]`` added again); or ``static``, the first
three given to ``hvd.init``, the pairs used, and their removal tried. Each step some ranks
are slowed at random, so under Prague the ranks' groups differ. Written as a user would:
Horovod's API only, nothing of Prague's.
"""

from __future__ import annotations

import random
import sys
import time

import horovod.torch as hvd
import torch
from _report import digest, prague_stats, report
from horovod.torch.mpi_ops import _basics

variant = sys.argv[1]
if variant == "dynamic":
    hvd.init(process_sets="dynamic")
    pair, other, trio = hvd.ProcessSet([0, 1]), hvd.ProcessSet([2, 3]), hvd.ProcessSet([0, 1, 2])
else:
    pair, other, trio = hvd.ProcessSet([0, 1]), hvd.ProcessSet([2, 3]), hvd.ProcessSet([0, 1, 2])
    hvd.init(process_sets=[pair, other, trio])
rank = hvd.rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9),
    named_parameters=model.named_parameters(),
)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
data = torch.Generator().manual_seed(100 + rank)
slow = random.Random(rank)


def train(steps: int) -> float:
    """``steps`` optimizer steps on this rank's data; one step in three slowed."""
    loss = torch.tensor(0.0)
    for _ in range(steps):
        x = torch.randn(32, 8, generator=data)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
        loss.backward()
        optimizer.step()
        if slow.random() < 0.3:
            time.sleep(slow.uniform(0.01, 0.06))  # the slowdown: this rank's step takes longer
    return loss.item()


def use(ps: hvd.ProcessSet, tag: str) -> dict[str, object]:
    """Named and unnamed collectives on ``ps`` by its members: what each returned."""
    if rank not in ps.ranks:
        return {}
    mine = torch.tensor([float(rank + 1)])
    return {
        "named_sum": hvd.allreduce(mine, op=hvd.Sum, name=f"{tag}.sum", process_set=ps).item(),
        "sum": hvd.allreduce(mine, op=hvd.Sum, process_set=ps).item(),
        "gathered": hvd.allgather(mine, process_set=ps).tolist(),
        "broadcast": hvd.broadcast(mine, root_rank=max(ps.ranks), process_set=ps).item(),
        "mean": hvd.grouped_allreduce([mine, 2 * mine], process_set=ps)[1].item(),
    }


def attempt(call, *args):
    """``call(*args)``, or the error it raised: (result, "Type: message")."""
    try:
        return call(*args), None
    except Exception as e:  # noqa: BLE001  (the test compares it with stock Horovod's)
        return None, f"{type(e).__name__}: {e}"


def table() -> list[list[int]]:
    return sorted(_basics._get_process_set_ids_and_ranks().values())


results: dict[str, object] = {}
train(15)
if variant == "dynamic":
    pair = hvd.add_process_set(pair)
    other = hvd.add_process_set([2, 3])
    trio = hvd.add_process_sets([trio])[0]
    world, results["world_error"] = attempt(hvd.add_process_set, [0, 1, 2, 3])
    _, results["again_error"] = attempt(hvd.add_process_set, [0, 1])
else:
    world, results["world_error"] = None, None
results["ids_valid"] = [ps.process_set_id is not None for ps in (pair, other, trio)]
# Collectives on a part of the ranks come after a global one (here a metric), as the test's
# other calls on the sets do: under Prague, a rank whose partner still waits in a group average
# with it must not be waiting in a collective the partner has not reached.
hvd.allreduce(torch.tensor([train(1)]), name="metric.first")
# [0, 1, 2] takes no collective: stock Horovod names an unnamed one after the count of every
# operation of the process, which [2, 3]'s members would then no longer share.
results["first"] = {"pair": use(pair, "a"), "other": use(other, "b")}
if world is not None:
    results["first"]["world"] = use(world, "d")
train(15)
metric = hvd.allreduce(torch.tensor([train(1)]), name="metric").item()
results["second"] = {"pair": use(pair, "e"), "other": use(other, "f")}
results["removed"] = [attempt(hvd.remove_process_set, ps) for ps in (pair, trio)]
results["table_after_removal"] = table()
train(15)  # under Prague, still averaging on its own [0, 1]
if variant == "dynamic":
    pair = hvd.add_process_set([0, 1])
    results["third"] = {"pair": use(pair, "h"), "other": use(other, "i")}
    train(5)
hvd.allreduce(torch.tensor([metric]), name="metric.end")  # a global collective: consensus
digests = hvd.allgather_object(digest(model.state_dict().values()), name="digests")
report(
    {
        "results": results,
        "same": len(set(digests)) == 1,
        "stats": prague_stats(hvd),
    }
)
hvd.shutdown()
