"""Prague's options adapted to a Horovod elastic world they cannot form groups in.

Under Horovod elastic the world shrinks when workers are lost and grows when hosts are
added; options given for the job's ``-np`` may not fit a world of another size (a group
larger than the world, a ``static`` schedule that does not divide it, a world of one rank
with nobody to average with). Each new world runs with ``adapt_to_world(given, size)``: a
pure function of the options given and the world's size, so every rank of the world derives
the same options (the ranks check that they were given the same ones), and a world the
options fit again runs them as given.

    >>> adapted = adapt_to_world(PragueConfig(group_size=4), 2)
    >>> adapted.config.group_size, adapted.changed
    (2, True)
    >>> print(adapted.changes())
    group_size=2 instead of 4
    >>> adapt_to_world(PragueConfig(group_size=4), 8).changed
    False

The rules, in order, each applied only where the options do not already fit:

- a world of 1 rank: ``strategy=allreduce`` (its one group is the world, that rank alone),
  so every step averages with nobody;
- a ``group_size`` larger than the world: the world's size;
- ``static`` whose group size does not divide the world: ``random``, whose divisions need
  not (a fixed pool of random divisions, like ``static`` without a threshold rule);
- anything else that still does not fit (a pool of divisions that does not connect the
  world): ``allreduce``.

Groups are drawn for the world as on one node, as ``runtime`` does under elastic.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings

from .config import PragueConfig
from .strategies import StaticStrategy, make_strategy
from .topology import Topology

FALLBACK = "allreduce"
"""The strategy that fits every world: its one group is the world."""
STATIC_FALLBACK = "random"
"""What ``static`` becomes where its schedule cannot divide the world."""


class OptionsAdapted(UserWarning):
    """Rank 0's warning that a Horovod elastic world runs with options other than those given."""


def warn_adapted(adapted: Adapted) -> None:
    """Warn that ``adapted`` differs from the options given (``OptionsAdapted``), every time:
    a job may reset into a world of the same size more than once, and Python's default
    shows a message once per place. The warnings filters still decide (``ignore``,
    ``error``)."""
    here = sys._getframe(0)
    warnings.warn_explicit(
        adapted.describe(),
        OptionsAdapted,
        here.f_code.co_filename,
        here.f_lineno,
        module=__name__,
        registry=None,  # a new one each time, so "default" shows it again
    )


@dataclasses.dataclass(frozen=True)
class Adapted:
    """The options a world of ``size`` ranks runs with, and why they differ from those given."""

    given: PragueConfig
    config: PragueConfig
    size: int
    reasons: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return self.config != self.given

    def changes(self) -> str:
        """Each option that differs from the one given, with both values."""
        return ", ".join(
            f"{f.name}={getattr(self.config, f.name)!r} instead of {getattr(self.given, f.name)!r}"
            for f in dataclasses.fields(PragueConfig)
            if getattr(self.config, f.name) != getattr(self.given, f.name)
        )

    def describe(self) -> str:
        """One sentence: the world, what changed and why.

        >>> print(adapt_to_world(PragueConfig(strategy="static"), 3).describe())
        Prague's options do not fit a world of 3 ranks, which runs with strategy='random' \
instead of 'static': the static schedule needs the world size (3) to be a multiple of \
the group size (2). The options as given apply again in a world they fit.
        """
        if not self.changed:
            return f"Prague's options fit a world of {_ranks(self.size)} as given."
        return (
            f"Prague's options do not fit a world of {_ranks(self.size)}, which runs with "
            f"{self.changes()}: {'; '.join(self.reasons)}. The options as given apply again "
            "in a world they fit."
        )


def adapt_to_world(given: PragueConfig, size: int) -> Adapted:
    """The options a Horovod elastic world of ``size`` ranks runs with, from those ``given``;
    see the module doc for the rules."""
    topology = Topology(size, size)
    if _unfit(given, topology) is None:
        return Adapted(given, given, size)
    if size == 1:
        return Adapted(
            given,
            dataclasses.replace(given, strategy=FALLBACK, group_size=0),
            size,
            ("a world of 1 rank has nobody to average with, so each step averages with nobody",),
        )
    config = given
    reasons: list[str] = []
    if config.group_size > size:
        reasons.append(
            f"group_size={config.group_size} is larger than the world, so groups of {size}"
        )
        config = dataclasses.replace(config, group_size=size)
    if config.strategy == "static":
        k = config.group_size or StaticStrategy.auto_group_size(size)
        if size % k:
            reasons.append(
                f"the static schedule needs the world size ({size}) to be a multiple of the "
                f"group size ({k})"
            )
            config = dataclasses.replace(config, strategy=STATIC_FALLBACK)
    problem = _unfit(config, topology)
    if problem is not None:
        reasons.append(f"{problem}, so the whole world averages at every step")
        config = dataclasses.replace(config, strategy=FALLBACK, group_size=0)
    return Adapted(given, config, size, tuple(reasons))


def _unfit(config: PragueConfig, topology: Topology) -> str | None:
    """Why ``config`` cannot form groups in ``topology``; None where it can."""
    try:
        make_strategy(config, topology)
    except ValueError as e:
        return str(e)
    return None


def _ranks(size: int) -> str:
    return f"{size} rank" if size == 1 else f"{size} ranks"
