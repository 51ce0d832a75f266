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
        self.peers = _peer_lists(actives, passives, pool_size)
        self.rng = random.Random(f"{seed}:generate")

    @classmethod
    def auto_group_size(cls, size: int) -> int:
        """Always pairs.

        >>> AdpsgdStrategy.auto_group_size(16)
        2
        """
        return 2

    def groups(self) -> tuple[Group, ...]:
        pairs = [tuple(sorted((a, p))) for a, peers in self.peers.items() for p in peers]
        return tuple(pair for pair in pairs if len(pair) < self.topology.size)

    def generate(
        self,
        requester: int,
        counts: Sequence[int],
        active: frozenset[int],
        backlog: Sequence[int] | None = None,
    ) -> list[Group]:
        peers = [p for p in self.peers.get(requester, ()) if p in active]
        if not peers:
            return [(requester,)]
        return [tuple(sorted((requester, self.rng.choice(peers))))]


def _peer_lists(actives: list[int], passives: list[int], limit: int) -> dict[int, tuple[int, ...]]:
    """Rotated peer lists in which no rank, active or passive, has more than ``limit`` peers."""
    peers: dict[int, list[int]] = {a: [] for a in actives}
    load = dict.fromkeys(passives, 0)
    for shift in range(min(limit, len(passives))):
        for j, a in enumerate(actives):
            for t in range(len(passives)):
                p = passives[(j + shift + t) % len(passives)]
                if load[p] < limit and p not in peers[a]:
                    peers[a].append(p)
                    load[p] += 1
                    break
    return {a: tuple(ps) for a, ps in peers.items()}
