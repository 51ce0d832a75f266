"""Horovod's checks of ``DistributedOptimizer``'s arguments, and the arguments that have nothing
to act on under Prague, for every framework."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from .config import PragueConfig


def warn_ignored(
    compression: Any, op: Any, no_compression: Any, average: Any, averaged: str
) -> None:
    """Warn that ``compression`` and an ``op`` other than ``average`` are ignored: gradients
    stay local, and ``averaged`` (the parameters, the variables) are averaged in groups."""
    if compression is not no_compression:
        warnings.warn(
            "DistributedOptimizer: compression is ignored under Prague, which keeps gradients "
            f"local and averages the {averaged} at full precision",
            stacklevel=4,
        )
    if op != average:
        warnings.warn(
            f"DistributedOptimizer: op={op!r} is ignored under Prague, which keeps gradients "
            f"local and averages the {averaged} within groups",
            stacklevel=4,
        )


def check_horovod_arguments(
    op: Any,
    average: Any,
    gradient_predivide_factor: float,
    num_groups: int,
    groups: Any,
    backward_passes_per_step: int,
    check_groups: Callable[[Any], None],
) -> None:
    """Horovod's checks, in Horovod's order, with its messages: ``gradient_predivide_factor``
    only with ``op`` ``average``; ``num_groups`` deprecated for ``groups``, which
    ``check_groups`` (the framework's) checks; ``backward_passes_per_step`` positive."""
    if gradient_predivide_factor != 1.0 and op != average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0:
        warnings.warn(
            "Parameter `num_groups` has been replaced by `groups`",
            DeprecationWarning,
            stacklevel=4,
        )
        groups = num_groups if groups is None else groups
    if groups is not None:
        check_groups(groups)
    if backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be > 0")


def check_sync_every(sync_every: int | None, config: Callable[[], PragueConfig]) -> None:
    """ValueError unless ``sync_every`` (an optimizer's argument) is None or the job's
    (``config()``, asked only then).

    The periodic global average is the Group Generator's (``WorldGroup``), made for every
    rank at once from the job's option; one optimizer cannot have its own period.
    """
    if sync_every is None:
        return
    if sync_every < 0:
        raise ValueError(f"sync_every: must be >= 0 (0 = never), got {sync_every}")
    job = config().sync_every
    if sync_every != job:
        raise ValueError(
            f"sync_every={sync_every} differs from the job's sync_every={job} "
            "(--prague-sync-every, HOROVOD_PRAGUE_SYNC_EVERY): the periodic global average "
            "is made for all ranks and optimizers at once, so set it for the job and leave "
            "the optimizer's sync_every unset"
        )
