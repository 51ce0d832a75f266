"""Process-set bookkeeping: one Horovod process set per group a strategy can emit.

Sets are registered in the same order on every rank, once, at init. The world group maps to
Horovod's global process set and a lone rank to none. docs/design.md explains why the sets are
given to ``hvd.init`` rather than added later.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .strategies import Group


class ProcessSetPool:
    """Maps groups to the Horovod process sets registered for them.

    ``sets`` are the ``hvd.ProcessSet`` objects given to ``hvd.init(process_sets=...)``, one per
    group in ``groups``; without them the sets are added now (Horovod's dynamic process sets),
    all at once where Horovod can (``add_process_sets``, ``patches/0022``).
    """

    def __init__(
        self,
        hvd: ModuleType,
        groups: tuple[Group, ...],
        size: int,
        rank: int,
        sets: list[Any] | None = None,
    ) -> None:
        self.hvd = hvd
        self.rank = rank
        self.world: Group = tuple(range(size))
        if sets is None:
            add_all = getattr(hvd, "add_process_sets", None)
            if add_all is not None:
                sets = add_all([list(group) for group in groups])
            else:
                sets = [hvd.add_process_set(list(group)) for group in groups]
        self.sets: dict[Group, Any] = dict(zip(groups, sets, strict=True))
        for group, process_set in self.sets.items():
            if tuple(process_set.ranks) != group:
                raise RuntimeError(f"process set {process_set} was registered for {group}")

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


def collective_name(group: Group, size: int) -> str:
    """The Horovod tensor-name prefix of ``group``'s collectives.

    Members run their shared groups in one order, so a name can be reused from one occurrence
    to the next, which lets Horovod's response cache serve it.
    """
    key = "world" if len(group) == size else "-".join(map(str, group))
    return f"prague.{key}"
