"""Horovod optimizer arguments that have nothing to act on under Prague, for every framework."""

from __future__ import annotations

import warnings
from typing import Any


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
