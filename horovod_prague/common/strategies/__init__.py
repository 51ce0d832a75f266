"""Group-generation strategies: pure Python, no Horovod import."""

from __future__ import annotations

from ..config import PragueConfig
from ..topology import Topology
from .adpsgd import AdpsgdStrategy
from .allreduce import AllreduceStrategy
from .base import GroupStrategy
from .divisions import Division, Group
from .random_division import RandomStrategy
from .smart import SmartStrategy
from .static import StaticStrategy

STRATEGY_CLASSES: dict[str, type[GroupStrategy]] = {
    cls.name: cls
    for cls in (SmartStrategy, StaticStrategy, RandomStrategy, AdpsgdStrategy, AllreduceStrategy)
}


def make_strategy(config: PragueConfig, topology: Topology) -> GroupStrategy:
    """The strategy ``config`` names, built for ``topology``; ValueError if it cannot fit."""
    cls = STRATEGY_CLASSES[config.strategy]
    return cls(
        topology,
        config.group_size or cls.auto_group_size(topology.size),
        config.pool_size,
        config.seed,
        config.threshold,
    )


__all__ = [
    "STRATEGY_CLASSES",
    "AdpsgdStrategy",
    "AllreduceStrategy",
    "Division",
    "Group",
    "GroupStrategy",
    "RandomStrategy",
    "SmartStrategy",
    "StaticStrategy",
    "make_strategy",
]
