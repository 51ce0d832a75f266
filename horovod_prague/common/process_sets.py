"""Process-set bookkeeping: one Horovod process set per group a strategy can emit, and the
script's own sets beside them.

Sets are registered in the same order on every rank, once, at init. The world group maps to
Horovod's global process set and a lone rank to none. docs/design.md explains why the sets are
given to ``hvd.init`` rather than added later.

Horovod keeps one process set per list of ranks. A script's set with the ranks of one of
Prague's is that set: ``add_process_set`` gives the script Prague's id, and
``remove_process_set`` only drops the script's hold on it, so neither side removes a set the
other still uses (``ProcessSetPool.add_for_script``, ``ProcessSetPool.remove_for_script``).
"""

from __future__ import annotations

import collections
import hashlib
import os
import re
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import Any

from .strategies import Group

PRAGUE_PREFIX = "prague."
"""Every Horovod collective Prague itself issues has a name that begins so; a script's
collectives, which have no such name, are the ones ``script_collectives`` records."""

DYNAMIC_SETS_VAR = "HOROVOD_DYNAMIC_PROCESS_SETS"


class ProcessSetPool:
    """Maps groups to the Horovod process sets registered for them, and knows the script's.

    ``sets`` are the ``hvd.ProcessSet`` objects given to ``hvd.init(process_sets=...)``, one per
    group in ``groups``; without them the sets are added now (Horovod's dynamic process sets),
    all at once where Horovod can (``add_process_sets``, ``patches/0022``), except those with
    the ranks of one of ``script_sets``, the script's own sets given to ``init``, which Prague
    shares. Prague keeps objects of its own for shared sets: the script may invalidate its
    copies (``remove_process_set``) without touching Prague's.
    """

    def __init__(
        self,
        hvd: ModuleType,
        groups: tuple[Group, ...],
        size: int,
        rank: int,
        sets: list[Any] | None = None,
        script_sets: Sequence[Any] = (),
    ) -> None:
        self.hvd = hvd
        self.rank = rank
        self.world: Group = tuple(range(size))
        script_sets = [
            s
            for s in script_sets
            if getattr(s, "ranks", None) is not None
            and getattr(s, "process_set_id", None) is not None
        ]
        shared = {tuple(s.ranks): s for s in reversed(script_sets)}  # the first of equal ones
        if sets is None:
            missing = [g for g in groups if g not in shared]
            added = iter(self._add(missing) if missing else [])
            sets = [shared[g] if g in shared else next(added) for g in groups]
        sets = [_own_copy(hvd, s) if any(s is t for t in script_sets) else s for s in sets]
        self.sets: dict[Group, Any] = dict(zip(groups, sets, strict=True))
        for group, process_set in self.sets.items():
            if tuple(process_set.ranks) != group:
                raise RuntimeError(f"process set {process_set} was registered for {group}")
        self.ids = {getattr(s, "process_set_id", None) for s in self.sets.values()}
        self.held: dict[Group, int] = {tuple(s.ranks): s.process_set_id for s in script_sets}
        """The script's sets (given to ``init`` or added since), by ranks: their ids."""
        self.dynamic = horovod_flag(os.environ.get(DYNAMIC_SETS_VAR))
        """Whether Horovod adds and removes sets after ``init`` (it read the variable there)."""

    def _add(self, groups: list[Group]) -> list[Any]:
        add_all = getattr(self.hvd, "add_process_sets", None)
        if add_all is not None:
            return list(add_all([list(group) for group in groups]))
        return [self.hvd.add_process_set(list(group)) for group in groups]

    def get(self, group: Group) -> Any:
        """The process set for ``group``; ValueError if this rank is not in it or it is unknown."""
        if self.rank not in group:
            raise ValueError(f"rank {self.rank} is not a member of group {group}")
        if group == self.world:
            return self.hvd.global_process_set
        try:
            return self.sets[group]
        except KeyError:
            raise ValueError(
                f"group {group} has no registered process set; groups must come from "
                "next_group() of the same job"
            ) from None

    def per_rank(self) -> int:
        """How many of the registered sets this rank belongs to."""
        return sum(self.rank in g for g in self.sets)

    def add_for_script(self, process_sets: Sequence[Any], batch: bool) -> list[Any]:
        """Horovod's ``add_process_sets`` (``batch``) or ``add_process_set`` of each of
        ``process_sets`` (a ``ProcessSet`` or a list of ranks) for the script, as in stock
        Horovod: the sets, ready for collectives, or ValueError for one the script already
        holds or gives twice (then none is added). A set with the ranks of one of Prague's is
        that set, under its id; Horovod adds the others.

        Every rank decides alike: Prague's sets and the script's calls are the same on all.
        """
        hvd = self.hvd
        sets = [s if isinstance(s, hvd.ProcessSet) else hvd.ProcessSet(s) for s in process_sets]
        if not self.dynamic or any(s.ranks is None for s in sets):
            # Horovod's own answer: it refuses both (no dynamic process sets; a communicator).
            return list(hvd.add_process_sets(sets)) if batch else [hvd.add_process_set(sets[0])]
        keys = [tuple(s.ranks) for s in sets]
        if len(set(keys)) < len(keys) or any(k in self.held for k in keys):
            raise ValueError(
                f"Attempted to add a duplicate process set: {sets if batch else sets[0]}"
            )
        new = [s for s, k in zip(sets, keys, strict=True) if k not in self.sets]
        if batch and new:
            hvd.add_process_sets(new)
        elif new:
            hvd.add_process_set(new[0])
        for process_set, key in zip(sets, keys, strict=True):
            if key in self.sets:
                process_set.process_set_id = self.sets[key].process_set_id
            self.held[key] = process_set.process_set_id
        return sets

    def remove_for_script(self, process_set: Any) -> bool:
        """Horovod's ``remove_process_set`` for the script: True where it removed the script's
        set. One of Prague's sets stays registered: the script's object is invalidated, as
        Horovod invalidates it, and Prague keeps averaging on its own."""
        ps_id = process_set.process_set_id
        if not self.dynamic or ps_id is None or ps_id == self.hvd.global_process_set.process_set_id:
            return bool(self.hvd.remove_process_set(process_set))
        held = [key for key, held_id in self.held.items() if held_id == ps_id]
        for key in held:
            del self.held[key]
        if ps_id in self.ids:
            process_set._invalidate()
            return bool(held)
        return bool(self.hvd.remove_process_set(process_set))


def _own_copy(hvd: ModuleType, process_set: Any) -> Any:
    """A ``ProcessSet`` object of Prague's with ``process_set``'s ranks and id."""
    own = hvd.ProcessSet(list(process_set.ranks))
    own.process_set_id = process_set.process_set_id
    return own


def horovod_flag(value: str | None) -> bool:
    """A boolean variable as Horovod's C++ side reads it: its leading integer, not zero.

    >>> [horovod_flag(v) for v in (None, "", "0", "1", " 2x", "true")]
    [False, False, False, True, True, False]
    """
    match = re.match(r"\s*([+-]?\d+)", value or "")
    return bool(match and int(match.group(1)))


def collective_name(group: Group, size: int) -> str:
    """The Horovod tensor-name prefix of ``group``'s collectives.

    Members run their shared groups in one order, so a name can be reused from one occurrence
    to the next, which lets Horovod's response cache serve it.
    """
    key = "world" if len(group) == size else "-".join(map(str, group))
    return f"{PRAGUE_PREFIX}{key}"


NAME_CYCLE = 2
"""Collective names a group's averages take in turn (``AverageNames``). A group has one
average running at a time on a rank, and its members cannot drift apart by more than one
(the k-th needs every member), so two tell neighbours apart; Horovod's response cache holds
an entry per tensor and name (1024 per process set by default): two names leave room for
models of up to 512 tensors."""


class AverageNames:
    """The collective names of one job's group averages on this rank.

    Members run their shared groups in one order, so the k-th occurrence of a group is the
    same collective on each. The name carries k modulo ``NAME_CYCLE``: a member an
    occurrence ahead of its partner (a bug in the order) waits on another name and times out
    naming the group, while Horovod's response cache, which serves only a name it has seen,
    skips the full negotiation of the rest. The name ends with a digest of the tensors'
    dtypes and shapes (``signature``): members that would average different tensors (a bug
    in how a script steps) wait on different names and time out naming the group, instead of
    averaging unrelated values.

        >>> import numpy as np
        >>> names = AverageNames()
        >>> [names.next("prague.0-1", (0, 1), [np.zeros(3)]) for _ in range(3)]
        ['prague.0-1.n1.a1028492', 'prague.0-1.n0.a1028492', 'prague.0-1.n1.a1028492']
    """

    def __init__(self) -> None:
        self.occurrences: collections.Counter[Group] = collections.Counter()
        """How many averages of each group this rank has started."""

    def next(self, prefix: str, group: Group, values: Iterable[Any]) -> str:
        """The name of ``group``'s next average of ``values``, under ``prefix`` (its
        ``collective_name``)."""
        self.occurrences[group] += 1
        k = self.occurrences[group] % NAME_CYCLE
        return f"{prefix}.n{k}.{signature(values)}"


def signature(tensors: Iterable[Any]) -> str:
    """A short digest of the tensors' dtypes and shapes, in order.

    >>> import numpy as np
    >>> signature([np.zeros(3)]) == signature([np.ones(3)]) != signature([np.zeros(4)])
    True
    """
    described = ";".join(f"{t.dtype}{tuple(t.shape)}" for t in tensors)
    return hashlib.sha1(described.encode()).hexdigest()[:8]
