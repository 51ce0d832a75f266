"""``adpsgd``: AD-PSGD's random pairs, with its active/passive split.

Even ranks are active, odd ranks passive. An active rank that needs a group pairs with a random
passive rank from its own short list of peers; a passive rank never starts a pair and trains
alone until an active rank picks it. Each active rank's list holds ``pool_size`` passive ranks
(rotated per active rank), which bounds the Horovod process sets per rank.

    >>> from horovod_prague.common.topology import Topology
    >>> AdpsgdStrategy(Topology(4, 4), group_size=2, pool_size=2, seed=0).groups()
    ((0, 1), (0, 3), (2, 3), (1, 2))
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from ..topology import Topology
from .base import GroupStrategy
from .divisions import Group


class AdpsgdStrategy(GroupStrategy):
    name = "adpsgd"

    def __init__(
        self, topology: Topology, group_size: int, pool_size: int, seed: int, threshold: int = 0
    ) -> None:
        if group_size != 2:
            raise ValueError(f"group_size: adpsgd averages in pairs; got group_size={group_size}")
        super().__init__(topology, group_size, pool_size, seed, threshold)
        actives = list(range(0, topology.size, 2))
        passives = list(range(1, topology.size, 2))
        width = min(pool_size, len(passives))
        self.peers: dict[int, tuple[int, ...]] = {
            a: tuple(passives[(j + s) % len(passives)] for s in range(width))
            for j, a in enumerate(actives)
        }
        self.rng = random.Random(f"{seed}:generate")

    def groups(self) -> tuple[Group, ...]:
        seen: dict[Group, None] = {}
        for active, peers in self.peers.items():
            for peer in peers:
                seen.setdefault(tuple(sorted((active, peer))))
        return tuple(seen)

    def generate(
        self, requester: int, counts: Sequence[int], active: frozenset[int]
    ) -> list[Group]:
        peers = [p for p in self.peers.get(requester, ()) if p in active]
        if not peers:
            return [(requester,)]
        return [tuple(sorted((requester, self.rng.choice(peers))))]
