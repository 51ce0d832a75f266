"""A step's injected compute: a sleep, or CPU work.

A sleep stands for a GPU's compute: nothing on the host slows it, so 8 ranks fit on 2 cores.
CPU work (``prague-bench --compute-by cpu``) stands for compute that a slower host does
slower: a fixed amount of arithmetic, which a CPU quota (``--slow-host``) stretches. Its
amount per millisecond is measured once, on the launcher, before any job runs::

    rate = units_per_ms()          # on an idle core
    work(round(rate * 20))         # about 20 ms there; longer on a host with less CPU
"""

from __future__ import annotations

import time

import numpy as np

_MATRIX = np.random.default_rng(0).standard_normal((32, 32))


def work(units: int) -> None:
    """``units`` products of a 32 x 32 matrix: CPU work of a fixed amount."""
    m = _MATRIX
    for _ in range(units):
        m @ m  # noqa: B018  (the work is the point)


def units_per_ms(seconds: float = 0.3) -> float:
    """How many ``work`` units this process does per millisecond (the best of three tries
    of ``seconds`` / 3 each, so a moment of noise does not lower it)."""
    best = 0.0
    for _ in range(3):
        units, began = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - began) < seconds / 3:
            work(100)
            units += 100
        best = max(best, units / (1e3 * elapsed))
    return best
