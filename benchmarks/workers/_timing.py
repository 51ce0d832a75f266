"""Timing shared by the benchmark workers."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from types import ModuleType


def slowest_median(hvd: ModuleType, fn: Callable[[], object], reps: int, name: str) -> float:
    """Seconds per call of ``fn``: each rank's median of ``reps`` calls, the slowest rank's."""
    fn()
    hvd.barrier()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return max(hvd.allgather_object(statistics.median(times), name=name))


def interleaved_medians(
    hvd: ModuleType, fns: dict[str, Callable[[], object]], reps: int, name: str
) -> dict[str, float]:
    """Like ``slowest_median`` for several ops, run in turn within each repetition, so drift
    on a shared machine affects them alike."""
    for fn in fns.values():
        fn()
    hvd.barrier()
    times: dict[str, list[float]] = {key: [] for key in fns}
    for rep in range(reps):
        keys = list(fns)
        keys = keys[rep % len(keys) :] + keys[: rep % len(keys)]
        for key in keys:
            t0 = time.perf_counter()
            fns[key]()
            times[key].append(time.perf_counter() - t0)
    medians = {key: statistics.median(ts) for key, ts in times.items()}
    gathered = hvd.allgather_object(medians, name=name)
    return {key: max(m[key] for m in gathered) for key in fns}
