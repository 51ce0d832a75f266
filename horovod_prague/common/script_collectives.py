"""The script's own Horovod collectives under Prague: one name on every member, and a deadline.

Horovod names a collective called without a name after this process's count of Horovod
operations (PyTorch: ``allgather.noname.<handle>``), and matches the members' requests by
name. In stock Horovod every rank has issued the same operations, so the counts agree. Under
Prague they do not: each rank has run the group averages of its own groups, so the k-th
unnamed collective would carry a different name on each rank, and Horovod would wait for a
match that never comes.

Here an unnamed collective is named after how many unnamed collectives this rank has started
on the same process set since ``init`` (or the last elastic reset): Horovod's contract, that
every member calls a process set's collectives in one order, makes that count the same on
every member. The count belongs to the job (``PragueRuntime.script_collectives``), which a
reset replaces, so survivors and workers that join count from zero together.

    >>> names = ScriptCollectives()
    >>> names.name("allgather", None, 0), names.name("allreduce", None, 0)
    ('allgather.noname.1', 'allreduce.noname.2')
    >>> names.name("allreduce", None, 3), names.name("allreduce", "loss", 0)
    ('allreduce.noname.1', 'loss')
    >>> names.started(7, "allgather.noname.1", (0, 1, 2, 3))
    >>> names.finished(7), names.finished(7)
    (Started(name='allgather.noname.1', ranks=(0, 1, 2, 3)), None)
"""

from __future__ import annotations

import collections
import threading
from typing import Any, NamedTuple

from .process_sets import PRAGUE_PREFIX
from .strategies import Group


class Started(NamedTuple):
    """A script's collective in flight: its name and its process set's ranks."""

    name: str
    ranks: Group


class ScriptCollectives:
    """Names for this job's unnamed collectives, and the script's collectives in flight."""

    def __init__(self) -> None:
        self._counts: collections.Counter[Any] = collections.Counter()
        self._in_flight: dict[int, Started] = {}
        self._lock = threading.Lock()  # a script may start collectives from several threads

    def name(self, kind: str, name: str | None, process_set: Any) -> str:
        """``name``, or for an unnamed collective of ``kind`` the next name on its set
        (``process_set``: a key that tells sets apart, their id and ranks)."""
        if name is not None:
            return name
        with self._lock:
            self._counts[process_set] += 1
            return f"{kind}.noname.{self._counts[process_set]}"

    def started(self, handle: int, name: str, ranks: Group) -> None:
        """Remember the script's collective ``name`` on ``ranks``, whose handle is ``handle``
        (Prague's own are not remembered: their waits have deadlines of their own)."""
        if name.startswith(PRAGUE_PREFIX):
            return
        with self._lock:
            self._in_flight[handle] = Started(name, tuple(ranks))

    def finished(self, handle: int) -> Started | None:
        """The collective of ``handle``, forgotten now that it is being waited for; None for
        one not started through ``started`` (Prague's own, Horovod's join)."""
        with self._lock:
            return self._in_flight.pop(handle, None)


def not_reached(
    started: Started, rank: int, collectives: list[str | None], silence: list[float | None]
) -> str:
    """Which members of ``started``'s set did not reach it, from what each rank told the Group
    Generator it waits in (``collectives``); ``silence`` is None for ranks that finished.

        >>> said = not_reached(Started("allgather.noname.3", (0, 1, 2, 3)), 0,
        ...                    ["allgather.noname.3", None, None, "allreduce.noname.4"],
        ...                    [1.0, 1.0, None, 1.0])
        >>> said.split(" (")[0]
        'ranks [1, 2, 3] did not reach it'
        >>> said.split("; ")[1:]
        ['rank 2 has finished training', "rank 3 waits in 'allreduce.noname.4')"]
    """
    missing = [r for r in started.ranks if r != rank and collectives[r] != started.name]
    if not missing:
        return "every member reached it; Horovod did not complete it"
    parts = []
    for r in missing:
        if r < len(silence) and silence[r] is None:
            parts.append(f"rank {r} has finished training")
        elif collectives[r] is None:
            parts.append(
                f"rank {r} waits in no collective of the script: still computing, stopped or hung"
            )
        else:
            parts.append(f"rank {r} waits in {collectives[r]!r}")
    who = f"rank {missing[0]}" if len(missing) == 1 else f"ranks {missing}"
    return f"{who} did not reach it ({'; '.join(parts)})"
