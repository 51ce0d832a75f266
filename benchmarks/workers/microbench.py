"""One job of the micro-benchmark (run by benchmarks/microbench.py under horovodrun).

Measures, on this job's ranks:
- Group Generator request latency: ranks 1.. send next_group requests to a Group Generator
  served from rank 0 (a fresh one, so no real job's buffers are touched) while rank 0 first
  sleeps, then trains a small MLP in its main thread;
- P-Reduce (horovod_prague's partial_allreduce) of 1M and 10M floats in this job's groups,
  against a bare Horovod allreduce on the same process set and a global Horovod allreduce.
Rank 0 prints one JSON line.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch
from _timing import interleaved_medians

import horovod_prague.torch as hvd
from horovod_prague.common.generator_client import GroupGeneratorClient
from horovod_prague.common.generator_service import GroupGeneratorServer
from horovod_prague.common.group_generator import GroupGenerator
from horovod_prague.common.protocol import new_token
from horovod_prague.common.strategies import make_strategy

group_size = int(sys.argv[1])
sizes = [int(s) for s in sys.argv[2].split(",")]
hvd.init(strategy="static", group_size=group_size)
torch.set_num_threads(1)
rank, size = hvd.rank(), hvd.size()
rt = hvd.runtime()


def gg_latency(seconds: float, rank0_trains: bool) -> list[float]:
    server = None
    offer = None
    if rank == 0:
        gg = GroupGenerator(make_strategy(rt.config, rt.topology))
        server = GroupGeneratorServer(gg, new_token(), "bench")
        offer = (*server.address, server.token.hex())
    offer = hvd.broadcast_object(offer, root_rank=0, name=f"bench.offer.{rank0_trains}")
    latencies: list[float] = []
    hvd.barrier()
    deadline = time.perf_counter() + seconds
    if rank == 0:
        model = torch.nn.Sequential(
            torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
        )
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
        while time.perf_counter() < deadline:
            if rank0_trains:
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
            else:
                time.sleep(0.05)
    else:
        with GroupGeneratorClient(offer[0], offer[1], bytes.fromhex(offer[2]), rank, 10) as c:
            c.hello("bench")
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                c.next_group()
                latencies.append(time.perf_counter() - t0)
    gathered = hvd.allgather_object(latencies, name=f"bench.lat.{rank0_trains}")
    if server is not None:
        server.close()
    return sorted(x for per_rank in gathered for x in per_rank)


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


result: dict = {"ranks": size, "group_size": group_size, "sets_per_rank": rt.pool.per_rank()}
for trains in (False, True):
    lat = gg_latency(3.0, trains)
    key = "gg_rank0_training" if trains else "gg_rank0_idle"
    result[key] = {
        "median_ms": 1e3 * statistics.median(lat),
        "p99_ms": 1e3 * percentile(lat, 0.99),
        "requests": len(lat),
    }

group = next(g for g in rt.strategy.schedule[0] if rank in g)
process_set = rt.process_set(group)
for n in sizes:
    reps = 12 if n <= 1_000_000 else 5
    t = torch.ones(n)
    ops = {
        "preduce": lambda t=t: hvd.partial_allreduce([t], group),
        "bare_set": lambda t=t: hvd.allreduce_(
            t, op=hvd.Average, process_set=process_set, name="bare"
        ),
        "global": lambda t=t: hvd.allreduce_(t, op=hvd.Average, name="g"),
    }
    for kind, seconds in interleaved_medians(hvd, ops, reps, f"ops{n}").items():
        result[f"{kind}_{n}"] = seconds
if rank == 0:
    print("BENCH " + json.dumps(result), flush=True)
hvd.shutdown()
