"""The waits for a script's own collectives under Prague, each with the job's deadline.

A script's collective completes only when every member of its process set has reached it.
Under stock Horovod a member that never does (ranks that call different collectives) makes
the others wait for ever. Here every wait has the job's ``timeout``: half way, the waiting
rank tells the Group Generator what it waits in (``awaiting``), so that at the deadline the
error names the collective and the members that did not reach it, as they told it::

    waits = ScriptWaits(lambda: binding.job.runtime, binding.runtime, lambda: binding.job.stats)
    name = waits.name("allgather", None, key)             # one name on every member
    handle = horovod_allgather(tensor, name=name)
    waits.started(handle, name, process_set)
    waits.wait(handle, lambda: hvd.poll(handle))         # GroupWaitTimeout at the deadline

Before ``init`` (no runtime), names and waits are Horovod's own.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any, TypeVar

from .overlap import BackgroundCall, GroupWaitTimeout, awaiting, wait_until
from .runtime import PragueRuntime
from .script_collectives import Started
from .step_stats import StepStats
from .stopped import late_script_collective, who_did_not_reach
from .strategies import Group

T = TypeVar("T")


def is_global(process_set: Any) -> bool:
    """Whether ``process_set`` (None: the default) is Horovod's global process set."""
    return process_set is None or process_set.process_set_id == 0


def ranks_of(rt: PragueRuntime, process_set: Any) -> Group:
    """The ranks of a Horovod process set of ``rt``'s world (None: the global one)."""
    if is_global(process_set):
        return rt.world
    return tuple(sorted(process_set.ranks))


def report_waiting(
    runtime: Callable[[], PragueRuntime], group: Group, collective: str | None = None
) -> None:
    """Tell the Group Generator of ``runtime()`` that this rank has waited long on ``group``
    (``awaiting``), or in the script's ``collective`` over the ranks ``group``; nothing if
    that fails, as the wait's own deadline then says what is wrong."""
    try:
        runtime().client.waiting(group, collective)
    except Exception:  # noqa: BLE001, S110
        pass


class ScriptWaits:
    """The names, and the waits with deadlines, of the script's collectives in the job that
    ``current()`` gives (None before ``init``); ``started()`` gives it started, for what the
    errors say."""

    def __init__(
        self,
        current: Callable[[], PragueRuntime | None],
        started: Callable[[], PragueRuntime],
        stats: Callable[[], StepStats],
    ) -> None:
        self._runtime = current
        self._started = started
        self._stats = stats

    def name(self, kind: str, name: str | None, process_set: Any) -> Any:
        """The name a script's collective of ``kind`` goes to Horovod with: its own, or for
        an unnamed one a name every member gives alike (``script_collectives``), counted per
        ``process_set`` (any hashable key that tells the sets apart); before ``init``,
        ``name`` as it is."""
        rt = self._runtime()
        return name if rt is None else rt.script_collectives.name(kind, name, process_set)

    def started(self, handle: int, name: str | None, process_set: Any) -> None:
        """Remember the script's collective ``name`` on ``process_set`` (by its ``handle``),
        for the deadline of the wait for it (``wait``)."""
        rt = self._runtime()
        if rt is None or name is None:
            return
        rt.script_collectives.started(handle, name, ranks_of(rt, process_set))

    def wait(self, handle: int, ready: Callable[[], bool]) -> None:
        """Wait until ``ready()``: the completion of the script's collective of ``handle``.

        A collective the script started under Prague (``started``) has the job's
        ``timeout``: a member that never reaches it ends this rank with a GroupWaitTimeout
        that names the collective and the members that did not reach it. Other handles
        (Horovod's ``join``, which waits for ranks that still train) have no deadline, as in
        Horovod.
        """
        rt = self._runtime()
        started = rt.script_collectives.finished(handle) if rt is not None else None
        with self._stats().away():
            if rt is None or started is None:
                wait_until(ready, math.inf, str)
                return
            self.with_deadline(
                started, rt.config.timeout, lambda seconds, late: wait_until(ready, seconds, late)
            )

    def run(self, call: Callable[[], T], name: str, process_set: Any) -> T:
        """``call()``, a script's blocking collective ``name`` on ``process_set`` (TensorFlow's
        eager ops, which wait inside with no deadline), on a background thread, waited for
        with the job's ``timeout`` as ``wait`` waits; in place before Prague has started (no
        Group Generator to tell who is missing)."""
        rt = self._runtime()
        if rt is None or not rt.started:
            return call()
        started = Started(name, ranks_of(rt, process_set))
        with self._stats().away():
            running = BackgroundCall(call)
            self.with_deadline(started, rt.config.timeout, running.result)
            return running.result(0.0, str)

    def with_deadline(
        self, started: Started, timeout: float, wait: Callable[[float, Callable[[], str]], Any]
    ) -> None:
        """``wait(seconds, late)`` for the script's collective ``started``, ``timeout`` in all,
        in two halves: the members that reached it have told the Group Generator so within
        the first (``awaiting``), and a look at who waits in what then is what the error says
        where the Group Generator is gone by the deadline (rank 0 may have ended first)."""
        half = timeout / 2
        earlier: list[str] = []
        with awaiting(
            started.ranks, lambda ranks: report_waiting(self._started, ranks, started.name)
        ):
            try:
                wait(half, str)
                return
            except GroupWaitTimeout:
                with contextlib.suppress(Exception):  # the error at the end says what is known
                    earlier.append(who_did_not_reach(self._started(), started))
            wait(
                timeout - half,
                lambda: late_script_collective(self._started(), started, timeout, earlier),
            )
