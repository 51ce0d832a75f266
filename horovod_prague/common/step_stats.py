"""How a rank's Prague steps went in this job: the counters behind ``exchange_stats``.

A ``Job`` holds one; an elastic reset makes a new one. ``progress``, the steps each counted at
the size of its batch (1 at the script's batch size; own pace sets ``scale``), is this rank's
weight in its averages under ``weighting=progress``::

    stats = StepStats()
    with stats.step():
        ...  # the step's group average; the step counts ``averaged``, ``alone``, ...
    stats.as_dict(waited_s=0.0)  # {"steps": 1, "averaged": 0, ..., "exchange_ms": 0}
    with stats.away():
        ...  # a script's collective: this rank waits on others, it does not compute
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator

KEYS = ("steps", "averaged", "alone", "in_flight", "waited", "owed")
"""What ``exchange_stats`` counts, in its order."""


@dataclasses.dataclass
class _Away:
    """One thread's time with other ranks (``StepStats.away``)."""

    depth: int = 0
    """How many ``away`` spans the thread is in (nested ones count once)."""
    since: float = 0.0
    """When its outer open span began."""
    closed: float = 0.0
    """The seconds of its spans closed so far."""


@dataclasses.dataclass
class StepStats:
    """One job's counters of one rank's Prague steps."""

    counts: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    """``KEYS``' counts."""
    seconds: float = 0.0
    """Seconds spent in Prague steps."""
    stepping_thread: int | None = None
    """The thread that took the last Prague step (``threading.get_ident``)."""
    scale: float = 1.0
    """The size of this rank's batches, as a part of the script's batch size: 1 but in a
    training pass under own pace (``horovod_prague.torch.pace``)."""
    progress: float = 0.0
    """The steps taken so far, each counted at its ``scale``: the samples seen, in batches
    of the script's size."""
    _away: dict[int, _Away] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    """Each thread's time with other ranks, by ``threading.get_ident``."""
    _away_lock: threading.Lock = dataclasses.field(
        default_factory=threading.Lock, repr=False, compare=False
    )

    @property
    def steps(self) -> int:
        """The Prague steps (``exchange`` calls) taken so far."""
        return self.counts["steps"]

    @contextlib.contextmanager
    def step(self) -> Iterator[collections.Counter[str]]:
        """Count and time one Prague step, taken by this thread; yields the counts."""
        began = time.perf_counter()
        self.counts["steps"] += 1
        self.progress += self.scale
        self.stepping_thread = threading.get_ident()
        try:
            with self.away():
                yield self.counts
        finally:
            self.seconds += time.perf_counter() - began

    @contextlib.contextmanager
    def away(self) -> Iterator[None]:
        """Time this thread spends with other ranks: in Prague's steps, a script's collectives
        and the consensus before them. Nested spans count once; each thread has its own."""
        with self._away_lock:
            mine = self._away.setdefault(threading.get_ident(), _Away())
            mine.depth += 1
            if mine.depth == 1:
                mine.since = time.perf_counter()
        try:
            yield
        finally:
            with self._away_lock:
                mine.depth -= 1
                if mine.depth == 0:
                    mine.closed += time.perf_counter() - mine.since

    def away_seconds(self) -> float:
        """The seconds this thread has spent with other ranks (``away``), a span still open
        included. Own pace counts the rest of a pass as busy."""
        with self._away_lock:
            mine = self._away.get(threading.get_ident())
            if mine is None:
                return 0.0
            return mine.closed + (time.perf_counter() - mine.since if mine.depth else 0.0)

    def as_dict(self, waited_s: float) -> dict[str, int]:
        """The counts by ``KEYS``, then the milliseconds spent in steps (``exchange_ms``)
        and, of those, in waits for averages in flight (``waited_ms``: ``waited_s``)."""
        stats = {k: self.counts[k] for k in KEYS}
        stats["exchange_ms"] = round(1e3 * self.seconds)
        stats["waited_ms"] = round(1e3 * waited_s)
        return stats
