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
    _away: dict[int, list[float]] = dataclasses.field(
        default_factory=dict, repr=False, compare=False
    )
    """Per thread: how deep it is in ``away`` spans, when its outer one began, and the
    seconds of its spans closed so far."""
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
            entry = self._away.setdefault(threading.get_ident(), [0, 0.0, 0.0])
            entry[0] += 1
            if entry[0] == 1:
                entry[1] = time.perf_counter()
        try:
            yield
        finally:
            with self._away_lock:
                entry[0] -= 1
                if entry[0] == 0:
                    entry[2] += time.perf_counter() - entry[1]

    def away_seconds(self) -> float:
        """The seconds this thread has spent with other ranks (``away``), a span still open
        included. Own pace counts the rest of a pass as busy."""
        with self._away_lock:
            entry = self._away.get(threading.get_ident())
            if entry is None:
                return 0.0
            return entry[2] + (time.perf_counter() - entry[1] if entry[0] else 0.0)

    def as_dict(self, waited_s: float) -> dict[str, int]:
        """The counts by ``KEYS``, then the milliseconds spent in steps (``exchange_ms``)
        and, of those, in waits for averages in flight (``waited_ms``: ``waited_s``)."""
        stats = {k: self.counts[k] for k in KEYS}
        stats["exchange_ms"] = round(1e3 * self.seconds)
        stats["waited_ms"] = round(1e3 * waited_s)
        return stats
