"""Deadlines for the script's collectives that a traced graph runs.

Inside a ``tf.function`` a script's Horovod collective is an op of the graph: it waits inside
TensorFlow's executor, where no caller's thread can give up on it. So it is watched from
beside: a staged call marks it ``begin`` just before the op runs and ``end`` just after, and a
watcher thread waits for the end with the job's timeout, as an eager collective is waited for
(``ScriptWaits.with_deadline``: the Group Generator learns half way what this rank waits
in). A collective that misses its deadline is passed to ``overdue``, which ends it the only
way an op can be ended from outside: by shutting Horovod down, which every rank's Horovod
then follows.

    >>> said = []
    >>> def wait_with_deadline(started, timeout, wait):
    ...     wait(timeout, lambda: f"{started.name} did not complete")
    >>> deadlines = StagedDeadlines(wait_with_deadline, lambda e, timeout: said.append(str(e)))
    >>> deadlines.begin("site 1", Started("allreduce.1", (0, 1)), 0.05)
    >>> deadlines.end("site 1")
    >>> deadlines.begin("site 2", Started("allgather.2", (0, 1)), 0.05)
    >>> deadlines.join()
    >>> said
    ['allgather.2 did not complete']
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable

from .overlap import SLOW_WAIT_SHARE, GroupWaitTimeout, report_slow_wait
from .script_collectives import Started

Wait = Callable[[float, Callable[[], str]], None]
"""``wait(seconds, late)``: returns once the collective ended, or raises GroupWaitTimeout
with ``late()`` when ``seconds`` have passed."""
WaitWithDeadline = Callable[[Started, float, Wait], None]
"""``wait_with_deadline(started, timeout, wait)``: ``wait`` for ``started``, ``timeout`` in
all (``ScriptWaits.with_deadline``)."""


class StagedDeadlines:
    """The staged collective of one job in flight, watched by a thread of its own.

    ``wait_with_deadline`` waits for one with its timeout (raising GroupWaitTimeout);
    ``overdue(error, timeout)`` is called, once per job, with the first that misses it.
    ``close`` (at an elastic reset, which replaces the job, or at shutdown) stops every watch
    without calling ``overdue``.

    One staged collective runs at a time: a traced graph runs its guarded collectives in
    program order, each after the last one's op, and the script calls its functions one after
    another. So a watch that begins ends the earlier ones, whose ops have completed or failed
    (a failed op, or a call that failed before the op, runs no ``end``).
    """

    def __init__(
        self,
        wait_with_deadline: WaitWithDeadline,
        overdue: Callable[[GroupWaitTimeout, float], None],
    ) -> None:
        self._wait_with_deadline = wait_with_deadline
        self._overdue = overdue
        self._current: tuple[Hashable, threading.Event] | None = None
        """The key and end of the collective watched now."""
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._fired = False
        self._lock = threading.Lock()

    def begin(self, key: Hashable, started: Started, timeout: float) -> None:
        """The staged collective ``key`` (its place in a graph) is about to run; ``started``
        names it; it must end within ``timeout`` seconds."""
        ended = threading.Event()
        watch = threading.Thread(
            target=self._watch, args=(started, timeout, ended), name="prague-deadline", daemon=True
        )
        with self._lock:
            if self._closed:
                return
            if self._current is not None:
                self._current[1].set()
            self._current = (key, ended)
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(watch)
        watch.start()

    def end(self, key: Hashable) -> None:
        """The staged collective ``key`` has completed."""
        with self._lock:
            current = self._current
            if current is None or current[0] != key:
                return
            self._current = None
        current[1].set()

    def close(self) -> None:
        """Stop watching, without calling ``overdue``."""
        with self._lock:
            self._closed = True
            current, self._current = self._current, None
        if current is not None:
            current[1].set()

    def join(self) -> None:
        """Wait for the watches running now to finish (for tests)."""
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join()

    def _watch(self, started: Started, timeout: float, ended: threading.Event) -> None:
        try:
            self._wait_with_deadline(
                started, timeout, lambda seconds, late: _wait(ended, seconds, late)
            )
        except GroupWaitTimeout as e:
            with self._lock:
                fire = not self._closed and not self._fired and not ended.is_set()
                self._fired = self._fired or fire
            if fire:
                self._overdue(e, timeout)


def _wait(ended: threading.Event, seconds: float, late: Callable[[], str]) -> None:
    """``Wait`` on ``ended``: reported as slow (``awaiting``) after ``SLOW_WAIT_SHARE``."""
    if ended.wait(SLOW_WAIT_SHARE * seconds):
        return
    report_slow_wait()
    if not ended.wait((1 - SLOW_WAIT_SHARE) * seconds):
        raise GroupWaitTimeout(late())
