"""Overlapped P-Reduce: a group average that runs while the rank keeps training.

A blocking P-Reduce makes a fast rank wait out its partner's slow step. Here a rank starts
its group's average on a *snapshot* of its model and goes on with local steps. When the
average completes, the rank adds what the average changed to the snapshot, ``average -
snapshot``, to its model: the model becomes the group's average plus the rank's own progress
since the snapshot, as if the average had been taken at the snapshot and the later steps
replayed on top. With equal weights the corrections sum to zero over a group, so the mean
of the models is kept.

With one average in flight at a time (``in_flight=1``), the rank's steps average with nobody
while it runs. An average started at the end of step t is applied at the end of step t +
``staleness`` at the latest: the steps between that find it still running take no group, and
the last one waits for it. ``staleness=1`` waits at the very next step, so every step
averages and each average overlaps one step's compute; ``staleness=0`` is the paper's
blocking P-Reduce.

With ``in_flight=k`` (2 by default) up to k averages run at once, so a step whose last
average is still running starts the next instead of stepping alone; ``staleness`` then counts
once k are running: the steps the oldest may run before the rank waits for it. Two averages
in flight never share a member besides the rank itself: a second average of the same ranks,
started from a snapshot that lacks the first one's correction, would correct their
difference twice, an unstable delayed feedback, so the rank first waits for the one it
overlaps (``make_room``). Averages of different members can still feed back along a cycle
of ranks (a fixed schedule alternating two pair divisions does), so an average that any
member started while another of its own was in flight is applied damped, by
``1 / in_flight``, on every member alike (``Overlap``).

    >>> class Done:  # a framework's PendingAverage whose collective already completed
    ...     applied = 0
    ...     def ready(self): return True
    ...     def apply(self): Done.applied += 1
    >>> averager = OverlappedAverager(staleness=2, timeout=1.0)
    >>> averager.may_start()
    True
    >>> averager.start(Done(), (0, 1)); averager.may_start(), Done.applied
    (True, 1)
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from .strategies import Group

T = TypeVar("T")


class PendingAverage(abc.ABC):
    """One group average in flight, as a framework starts it (``Binding.start_average``)."""

    moved: Callable[[Any, Any, float], None] | None = None
    """Told ``(tensor, move, scale)`` for what ``apply`` adds to each floating-point tensor
    (``TrackedModels.moved``), where momentum follows the averages."""

    @abc.abstractmethod
    def ready(self) -> bool:
        """Whether the collective has completed (never blocks)."""

    @abc.abstractmethod
    def apply(self) -> None:
        """Add what the average changed to the snapshot to the model; only once ``ready()``.

        Floating-point tensors take ``average - snapshot``, scaled by ``Overlap.scale``.
        Integer tensors (counters such as BatchNorm's ``num_batches_tracked``) take
        ``integer_share - snapshot``, whole: the increments made since the snapshot survive,
        members that counted in step are left as they are, and the corrections sum to zero
        over the group, so the group's total count is kept exactly and the final world
        average (a floor mean) gives every rank the count of steps. They are not damped: a
        damped correction would have to be rounded, losing or inventing counts, and what
        damping cures, a disagreement fed back along a cycle of ranks, stays within its
        initial size (and a count of rounding) for integers until the final world average
        settles it. Corrections add up in any order, so every average is applied whole
        whenever it completes."""


def integer_share(total: int, size: int, position: int) -> int:
    """The member at ``position`` of a group of ``size``: its share of the group's ``total``.

    The floor mean, plus one for each of the first ``total mod size`` members, so the shares
    sum to ``total``: a group's overlapped averages neither lose nor invent counts. The
    frameworks compute the same, element by element.

        >>> [integer_share(7, 3, p) for p in range(3)]
        [3, 2, 2]
        >>> [integer_share(-7, 3, p) for p in range(3)]
        [-2, -2, -3]
    """
    quotient, remainder = divmod(total, size)
    return quotient + (position < remainder)


@dataclasses.dataclass(frozen=True)
class Overlap:
    """What the members of an overlapped average agree on, when several may be in flight.

    A rank that starts an average while another of its own is in flight sends it from a
    snapshot that lacks that one's correction. Along a cycle of ranks such corrections feed
    back: alternating pair divisions {0,1}{2,3} and {0,2}{1,3}, each average applied two
    steps after its snapshot, leave the disagreement (1, -1, -1, 1) oscillating for ever.
    So every member sends ``flag`` in the average's own collective, and if the group's mean
    flag is above 0, every member scales its correction by ``damping`` (``1 / in_flight``):
    the same factor on every member keeps the group's mean, and the damped feedback decays.
    An average no member overlapped is applied whole, as with one in flight.

        >>> Overlap(started_during_another=False, damping=0.5).scale(0.0)
        1.0
        >>> Overlap(started_during_another=False, damping=0.5).scale(0.5)
        0.5
    """

    started_during_another: bool
    damping: float

    @property
    def flag(self) -> float:
        return 1.0 if self.started_during_another else 0.0

    def scale(self, mean_flag: float) -> float:
        """The factor on this rank's correction, from the group's mean of ``flag``."""
        return self.damping if mean_flag > 0 else 1.0


class GroupWaitTimeout(TimeoutError):
    """A group average did not complete within the job's timeout."""

    group: Group | None = None
    """The group waited on, where known (``awaiting``)."""


SLOW_WAIT_SHARE = 0.25
"""A wait that has lasted this share of its timeout is reported (``awaiting``)."""

_awaited = threading.local()


@contextlib.contextmanager
def awaiting(group: Group, report: Callable[[Group], None]) -> Iterator[None]:
    """Mark this thread's waits in the block as waits on ``group``'s average.

    A wait that lasts ``SLOW_WAIT_SHARE`` of its timeout calls ``report(group)`` once, then
    goes on waiting: the Group Generator learns who waits on whom, so a rank that times out
    can name the rank that holds it up. A GroupWaitTimeout raised in the block carries
    ``group``.

        >>> said = []
        >>> with awaiting((0, 1), said.append):
        ...     wait_until(lambda: len(said) > 0, timeout=0.4, late=str)
        >>> said
        [(0, 1)]
    """
    outer = getattr(_awaited, "report", None)
    _awaited.report = lambda: report(group)
    try:
        yield
    except GroupWaitTimeout as e:
        if e.group is None:
            e.group = group
        raise
    finally:
        _awaited.report = outer


def report_slow_wait() -> None:
    """Tell the Group Generator, as ``awaiting`` set up on this thread, that a wait is slow."""
    report = getattr(_awaited, "report", None)
    if report is not None:
        report()


@dataclasses.dataclass
class _InFlight:
    group: Group
    pending: PendingAverage
    started: int
    """The step that started it (``OverlappedAverager`` counts its steps)."""


class OverlappedAverager:
    """One rank's group averages in flight, and how many local steps each has been in flight.

    At most ``in_flight`` averages run at once, and no two of them share a member besides
    this rank: a second average of the same members, started on a snapshot that lacks the
    first one's correction, would correct their difference twice. ``waits`` and
    ``waited_s`` count the waits (for an average that reached ``staleness``, or for one that
    shares a member with the group about to start) and the seconds they took.
    """

    def __init__(
        self,
        staleness: int,
        timeout: float,
        report_slow: Callable[[Group], None] = lambda group: None,
        in_flight: int = 1,
    ) -> None:
        if staleness < 1:
            raise ValueError(f"staleness: the overlapped path needs >= 1, got {staleness}")
        if in_flight < 1:
            raise ValueError(f"in_flight: must be at least 1, got {in_flight}")
        self.staleness = staleness
        self.max_in_flight = in_flight
        self.timeout = timeout
        self.report_slow = report_slow
        """Called with the group when waiting for its average takes long (``awaiting``)."""
        self._flights: list[_InFlight] = []
        self._step = 0
        self.applied = 0
        self.waits = 0
        self.waited_s = 0.0

    def in_flight(self) -> int:
        """How many averages are in flight."""
        return len(self._flights)

    def may_start(self) -> bool:
        """Called once per step: whether this step starts a new group average.

        Applies the averages in flight that have completed. With fewer than ``in_flight``
        still running, the step may start one (True). Otherwise it averages with nobody
        (False), unless the oldest was started ``staleness`` steps ago: then this waits for
        it, and the step may start the next (True).
        """
        self._step += 1
        self.collect()
        while (
            len(self._flights) >= self.max_in_flight
            and self._step - self._flights[0].started >= self.staleness
        ):
            self._wait_for(self._flights[0])
        return len(self._flights) < self.max_in_flight

    def make_room(self, group: Group, rank: int) -> None:
        """Wait for the averages in flight that share a member other than ``rank`` with
        ``group``, the one about to start."""
        others = set(group) - {rank}
        for flight in [f for f in self._flights if others.intersection(f.group)]:
            self._wait_for(flight)

    def overlap(self) -> Overlap | None:
        """What the average about to start sends for its members to agree on its damping:
        None with one average in flight at most (nothing to agree on)."""
        if self.max_in_flight == 1:
            return None
        return Overlap(bool(self._flights), 1.0 / self.max_in_flight)

    def start(self, pending: PendingAverage, group: Group) -> None:
        """Track the average just started; ``make_room`` must have made room for it."""
        if len(self._flights) >= self.max_in_flight:
            raise RuntimeError(f"{len(self._flights)} overlapped group averages already in flight")
        self._flights.append(_InFlight(group, pending, self._step))

    def collect(self) -> None:
        """Apply the averages in flight that have completed, without waiting."""
        for flight in [f for f in self._flights if f.pending.ready()]:
            self._finish(flight)

    def drain(self) -> None:
        """Wait for every average in flight, oldest first, and apply it."""
        while self._flights:
            self._drain_one(self._flights[0])

    def _wait_for(self, flight: _InFlight) -> None:
        self.waits += 1
        began = time.perf_counter()
        try:
            self._drain_one(flight)
        finally:
            self.waited_s += time.perf_counter() - began

    def _drain_one(self, flight: _InFlight) -> None:
        with awaiting(flight.group, self.report_slow):
            wait_until(
                flight.pending.ready, self.timeout, lambda: _late(flight.group, self.timeout)
            )
        self._finish(flight)

    def _finish(self, flight: _InFlight) -> None:
        self._flights.remove(flight)
        flight.pending.apply()
        self.applied += 1


def wait_until(ready: Callable[[], bool], timeout: float, late: Callable[[], str]) -> None:
    """Poll ``ready`` with a sleep growing from 20 us to 1 ms; GroupWaitTimeout after ``timeout``.

    A wait still going after ``SLOW_WAIT_SHARE`` of ``timeout`` is reported (``awaiting``).
    With ``timeout=math.inf`` it waits as long as ``ready`` takes, and reports nothing.

    Sleeping between polls, rather than spinning as Horovod's ``synchronize`` does, leaves the
    core and the GIL to the ranks and threads that have work (docs/design.md, *Busy waiting*).
    """
    delay = 20e-6
    began = time.monotonic()
    deadline, slow = began + timeout, began + SLOW_WAIT_SHARE * timeout
    while not ready():
        now = time.monotonic()
        if now > slow:  # reported once, also when the first look is already past the deadline
            slow = math.inf
            report_slow_wait()
        if now > deadline:
            raise GroupWaitTimeout(late())
        time.sleep(delay)
        delay = min(delay * 2, 1e-3)


class BackgroundCall(Generic[T]):
    """``call()`` running on a daemon thread: for collectives a framework offers only as
    blocking calls (TensorFlow's eager Horovod ops), to overlap them or to wait with a deadline.

    A call that never returns is left behind: a daemon thread does not keep the process from
    exiting. Where no thread can start (at interpreter shutdown, from Python 3.12 on: the
    final average that ``leave`` runs at exit), the call runs in place, without a deadline.
    """

    def __init__(self, call: Callable[[], T]) -> None:
        self._call = call
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="prague-collective", daemon=True)
        try:
            self._thread.start()
        except RuntimeError:  # "can't create new thread at interpreter shutdown"
            self._run()

    def _run(self) -> None:
        try:
            self._value = self._call()
        except BaseException as e:  # noqa: BLE001  (re-raised in the caller's thread)
            self._error = e

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self, timeout: float, late: Callable[[], str]) -> T:
        """The call's value (or its exception); GroupWaitTimeout if not done by ``timeout``."""
        if self._thread.ident is not None:
            deadline = time.monotonic() + timeout
            self._thread.join(SLOW_WAIT_SHARE * timeout)
            if self._thread.is_alive():
                report_slow_wait()
                self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            raise GroupWaitTimeout(late())
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def call_with_deadline(call: Callable[[], T], timeout: float, late: Callable[[], str]) -> T:
    """``call()`` on a daemon thread; GroupWaitTimeout if it has not returned by ``timeout``."""
    return BackgroundCall(call).result(timeout, late)


def late_collective(name: str, timeout: float) -> str:
    """What a collective that missed its deadline says."""
    return (
        f"Horovod collective {name!r} did not complete within {timeout:g} s: a member of its "
        "group never reached it"
    )


def _late(group: Group, timeout: float) -> str:
    return (
        f"the average of group {list(group)} did not complete within {timeout:g} s: some of "
        f"ranks {list(group)} never reached it (stopped, hung, or far slower than the timeout; "
        "raise HOROVOD_PRAGUE_TIMEOUT for very long steps)"
    )
