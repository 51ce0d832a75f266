"""Overlapped P-Reduce: group averages that run while the rank keeps training.

A blocking P-Reduce makes a fast rank wait out its partner's slow step. Here a rank starts
its group's average on a *snapshot* of its model and goes on with its next local steps; when
the average completes, it moves its model by ``mix`` times the change the average made to the
snapshot. At most ``staleness`` averages are in flight: one more makes the rank wait for the
oldest. ``staleness=0`` is the paper's blocking P-Reduce (with ``mix=1``, a plain average).

Why ``mix`` is below 1: applied at full weight, an average that arrives ``s`` steps late pulls
two ranks together by a difference they have already closed with the averages in between, an
unstable delayed feedback (for a pair, ``D(t+1) = D(t) - mix * D(t-s)``). The default
``mix = 1 / (staleness + 1)`` keeps it stable; docs/design.md shows the measurements.

    >>> class Done:  # a framework's PendingAverage whose collective already completed
    ...     applied = []
    ...     def ready(self): return True
    ...     def apply(self, mix): Done.applied.append(mix)
    >>> averager = OverlappedAverager(staleness=1, mix=0.5, timeout=1.0)
    >>> averager.submit(Done(), (0, 1)); averager.collect(); Done.applied, averager.in_flight()
    ([0.5], 0)
"""

from __future__ import annotations

import abc
import collections
import time
from collections.abc import Callable

from .strategies import Group


class PendingAverage(abc.ABC):
    """One group average in flight, as a framework starts it (``Binding.start_average``)."""

    @abc.abstractmethod
    def ready(self) -> bool:
        """Whether the collective has completed (never blocks)."""

    @abc.abstractmethod
    def apply(self, mix: float) -> None:
        """Add ``mix * (average - snapshot)`` to the model; only once ``ready()``."""


class GroupWaitTimeout(TimeoutError):
    """A group average did not complete within the job's timeout."""


class OverlappedAverager:
    """Keeps one rank's group averages in flight, at most ``staleness`` of them."""

    def __init__(self, staleness: int, mix: float, timeout: float) -> None:
        if staleness < 1:
            raise ValueError(f"staleness: the overlapped path needs >= 1, got {staleness}")
        self.staleness = staleness
        self.mix = mix
        self.timeout = timeout
        self._pending: collections.deque[tuple[Group, PendingAverage]] = collections.deque()
        self.applied = 0

    def in_flight(self) -> int:
        return len(self._pending)

    def submit(self, pending: PendingAverage, group: Group) -> None:
        """Track ``pending``; wait for the oldest averages while more than ``staleness`` fly."""
        self._pending.append((group, pending))
        self.collect()
        while len(self._pending) > self.staleness:
            self._finish_oldest()

    def collect(self) -> None:
        """Apply every average that has completed, oldest first, without waiting."""
        while self._pending and self._pending[0][1].ready():
            self._finish_oldest()

    def drain(self) -> None:
        """Wait for every average in flight and apply it (before any blocking collective)."""
        while self._pending:
            self._finish_oldest()

    def _finish_oldest(self) -> None:
        group, pending = self._pending[0]
        wait_until(pending.ready, self.timeout, lambda: _late(group, self.timeout))
        self._pending.popleft()
        pending.apply(self.mix)
        self.applied += 1


def wait_until(ready: Callable[[], bool], timeout: float, late: Callable[[], str]) -> None:
    """Poll ``ready`` with a sleep growing from 20 us to 1 ms; GroupWaitTimeout after ``timeout``.

    Sleeping between polls, rather than spinning as Horovod's ``synchronize`` does, leaves the
    core and the GIL to the ranks and threads that have work (docs/design.md, *Busy waiting*).
    """
    delay = 20e-6
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise GroupWaitTimeout(late())
        time.sleep(delay)
        delay = min(delay * 2, 1e-3)


def _late(group: Group, timeout: float) -> str:
    return (
        f"the average of group {list(group)} did not complete within {timeout:g} s: some of "
        f"ranks {list(group)} never reached it (stopped, hung, or far slower than the timeout; "
        "raise HOROVOD_PRAGUE_TIMEOUT for very long steps)"
    )
