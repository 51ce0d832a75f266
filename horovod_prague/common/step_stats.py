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
    away_seconds: float = 0.0
    """Seconds spent in Prague's steps, in the script's collectives and in the consensus
    before them: with other ranks rather than computing. Own pace counts the rest of a
    pass as busy."""
    _away_depth: int = dataclasses.field(default=0, repr=False)
    _away_since: float = dataclasses.field(default=0.0, repr=False)
    _away_lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

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
        """Time spent with other ranks (``away_seconds``); nested uses, and uses on several
        threads at once, count their span once."""
        with self._away_lock:
            self._away_depth += 1
            if self._away_depth == 1:
                self._away_since = time.perf_counter()
        try:
            yield
        finally:
            with self._away_lock:
                self._away_depth -= 1
                if self._away_depth == 0:
                    self.away_seconds += time.perf_counter() - self._away_since

    def as_dict(self, waited_s: float) -> dict[str, int]:
        """The counts by ``KEYS``, then the milliseconds spent in steps (``exchange_ms``)
        and, of those, in waits for averages in flight (``waited_ms``: ``waited_s``)."""
        stats = {k: self.counts[k] for k in KEYS}
        stats["exchange_ms"] = round(1e3 * self.seconds)
        stats["waited_ms"] = round(1e3 * waited_s)
        return stats
