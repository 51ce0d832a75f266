"""Step a rank through group averages, record each, and say what the members' records say
it must give.

Framework-neutral: ``hvd`` is ``horovod_prague.torch`` or ``horovod_prague.tensorflow``, and
``copy`` turns a framework's tensor into a snapshot that supports ``+``, ``*`` and ``/`` by
floats (a torch tensor, a numpy array).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Record:
    snapshot: Any
    weight: float
    flagged: bool
    """This rank started the average while another of its own was in flight."""
    blocking: bool
    in_flight: int
    """This rank's averages in flight when it began."""


@dataclass
class Averages:
    """The records of one rank's averages, in the order run, and the groups they ran in."""

    records: list[Record] = field(default_factory=list)
    groups: list[tuple[int, ...]] = field(default_factory=list)

    def occurrences(self) -> list[tuple[tuple[int, ...], int]]:
        """(group, k) per average: the k-th time this rank ran that group, as its members do."""
        return [(g, self.groups[:i].count(g)) for i, g in enumerate(self.groups)]

    def corrections(self, gather: Callable[[Any], list[Any]], in_flight: int) -> tuple[Any, int]:
        """The sum over this rank's averages of ``scale * (weighted group mean - snapshot)``,
        from every rank's records (``gather``: an allgather of objects), and how many were
        damped. ``scale`` is ``1 / in_flight`` when any member flagged the average."""
        occurrences = self.occurrences()
        assert len(occurrences) == len(self.records) > 0
        everyone = gather(dict(zip(occurrences, self.records, strict=True)))
        total, damped = 0.0, 0
        for occurrence, own in zip(occurrences, self.records, strict=True):
            members = [everyone[m][occurrence] for m in occurrence[0]]
            assert len({r.blocking for r in members}) == 1, "members ran one average both ways"
            mean = sum(r.weight * r.snapshot for r in members) / sum(r.weight for r in members)
            scale = 1 / in_flight if any(r.flagged for r in members) else 1.0
            damped += scale < 1
            total = total + scale * (mean - own.snapshot)
        return total, damped


@contextlib.contextmanager
def recording(binding: Any, copy: Callable[[Any], Any]) -> Iterator[Averages]:
    """Record the first tensor of every average ``binding`` starts or runs blocking.

    Each must be flagged exactly when some other average of this rank's is in flight, and a
    blocking one must find none (they are applied first)."""
    averages = Averages()
    start_average, average = binding.start_average, binding.average

    def recorder(run: Callable[..., Any], blocking: bool) -> Callable[..., Any]:
        def record(values, name, process_set, size, overlap=None, *rest):
            flagged = overlap is not None and overlap.started_during_another
            in_flight = binding.job.averager.in_flight()
            assert flagged == (in_flight > 0)
            assert not (blocking and in_flight), "averages in flight were not applied"
            weight = binding.average_weight() or 1.0
            averages.records.append(Record(copy(values[0]), weight, flagged, blocking, in_flight))
            return run(values, name, process_set, size, overlap, *rest)

        return record

    binding.start_average = recorder(start_average, blocking=False)
    binding.average = recorder(average, blocking=True)
    try:
        yield averages
    finally:
        del binding.start_average, binding.average


def step_until(
    hvd: Any,
    tensors: list[Any],
    groups: int,
    averages: Averages,
    train: Callable[[], None],
    blocking_at: int | None = None,
) -> None:
    """Step until this rank has asked for ``groups`` groups, then drain.

    Each step averages ``tensors`` with ``exchange``, except the one asking for group number
    ``blocking_at`` (from 0), which runs ``partial_allreduce`` with ``next_group``; ``train()``
    follows every step. It runs to a number of groups, not of steps (why: the note at the top
    of ``overlap_checks.py``). The groups with partners are noted in ``averages``.
    """
    asked = 0
    while asked < groups:
        if asked == blocking_at:
            group = hvd.next_group()
            hvd.partial_allreduce(tensors, group)
        else:
            group = hvd.exchange(tensors)
        asked += group is not None
        if group is not None and len(group) > 1:
            averages.groups.append(tuple(group))
        train()
    hvd.drain()
