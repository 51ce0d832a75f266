"""Run a training script unchanged under the drop-in, timing Prague's calls on this rank.

    timed_example.py {poll,spin} SCRIPT [ARGS...]

``poll`` is the package as shipped; ``spin`` makes P-Reduce wait with Horovod's own
``synchronize`` (its busy wait) instead. Rank 0 prints ``BENCH {json}`` at exit: per timed
call the count, total and slowest seconds, and the wall time since start.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import time

import horovod_prague.common.binding as binding
import horovod_prague.torch.binding as torch_binding

START = time.perf_counter()
calls: dict[str, list[float]] = {}


def timed(name, fn):
    def call(*args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            calls.setdefault(name, []).append(time.perf_counter() - t)

    return call


for name in ("next_group", "partial_allreduce", "average_model"):
    setattr(binding.Binding, name, timed(name, getattr(binding.Binding, name)))
mode, script, sys.argv = sys.argv[1], sys.argv[2], sys.argv[2:]
if mode == "spin":
    torch_binding.wait = lambda handle, timeout, name: torch_binding._hvd.synchronize(handle)


def report() -> None:
    if os.environ.get("HOROVOD_RANK", os.environ.get("OMPI_COMM_WORLD_RANK")) != "0":
        return
    summary = {k: [len(v), sum(v), max(v)] for k, v in calls.items()}
    summary["wall"] = time.perf_counter() - START
    print("BENCH " + json.dumps(summary), flush=True)


atexit.register(report)
runpy.run_path(script, run_name="__main__")
