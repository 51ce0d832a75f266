"""``bench.elastic_worker`` with every phase of an elastic reset timed on each rank.

Run as the elastic worker is, with the same arguments; wraps, before Horovod is imported,
the calls a reset makes (Horovod's shutdown, init and ``add_process_set[s]``; Prague's process
sets and start; the state's restore and sync; the training step, and in it Prague's average
and its group) and writes each call's start and end, in seconds since the epoch, to
``<out>.phases.<pid>`` when the worker ends. A killed rank writes none.
``benchmarks/reset_phases.py`` reads them.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CALLS: list[tuple[str, float, float]] = []


def timed(owner: Any, name: str, phase: str) -> None:
    original: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        start = time.time()
        try:
            return original(*args, **kwargs)
        finally:
            CALLS.append((phase, start, time.time()))

    setattr(owner, name, call)


def main() -> None:
    import horovod.common.basics as basics
    import horovod.common.process_sets as process_sets

    timed(basics.HorovodBasics, "init", "horovod init")
    timed(basics.HorovodBasics, "shutdown", "horovod shutdown")
    for name in ("add_process_set", "add_process_sets"):  # the second with patches/0022
        if hasattr(process_sets, name):
            timed(process_sets, name, "horovod adding them (add_process_set[s])")

    from horovod.torch.elastic.state import TorchState

    from horovod_prague.common import process_sets as prague_sets
    from horovod_prague.common import runtime

    timed(TorchState, "restore", "state restored (a collective failed)")
    timed(TorchState, "sync", "state synced")
    timed(prague_sets.ProcessSetPool, "__init__", "prague's process sets")
    timed(runtime.PragueRuntime, "start", "prague's start")
    timed(runtime.PragueRuntime, "_connect", "group generator connection")

    from horovod_prague.bench import elastic_worker
    from horovod_prague.bench.torch_trainer import FrameworkTrainer
    from horovod_prague.common.binding import Binding

    timed(FrameworkTrainer, "step", "first step (its training and averaging)")
    timed(Binding, "exchange", "prague's average in the first step")
    timed(Binding, "next_group", "group generator's group for it")

    out = None
    try:
        out = sys.argv[sys.argv.index("--out") + 1]
        elastic_worker.main()
    finally:
        if out is not None:
            Path(f"{out}.phases.{os.getpid()}").write_text(json.dumps(CALLS))


if __name__ == "__main__":
    main()
