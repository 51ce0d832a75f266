"""``smart``: Prague's randomized Group Generator.

Group Division from a pool of divisions that alternate between intra-node and inter-node
groups, plus the threshold rule: when worker ``i`` triggers a generation, worker ``w`` may share
a group with it only if ``c_w > c_i - threshold``, where ``c`` counts each worker's requests.
Groups holding a worker that lags that far are left out of the generation, so fast workers
never queue behind a straggler; the straggler meets others when it triggers a generation.

One guard beyond the paper: a worker that still has a group buffered is not placed in a group
by another worker's generation. Request counts cannot see such a backlog: ranks kept waiting
behind a straggler's queue stop counting up and the straggler looks "ahead" of them
(docs/design.md, *Group generation*, says why). With the guard no rank owes more than one group it
did not ask for. Threshold 0 turns both rules off.

    >>> from horovod_prague.common.topology import Topology
    >>> s = SmartStrategy(Topology(4, 4), group_size=2, pool_size=3, seed=0, threshold=2)
    >>> s.generate(0, counts=[10, 10, 10, 1], active=frozenset(range(4)))[0]
    (0, 1)
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from .divisions import Division, inter_division, intra_division
from .random_division import RandomStrategy


class SmartStrategy(RandomStrategy):
    name = "smart"

    @property
    def multi_node(self) -> bool:
        return self.topology.cross_size > 1 and self.topology.local_size > 1

    def make_division(self, index: int, rng: random.Random) -> Division:
        if not self.multi_node:
            return super().make_division(index, rng)
        maker = intra_division if index % 2 == 0 else inter_division
        return maker(self.topology, self.group_size, rng)

    def eligible(
        self,
        requester: int,
        counts: Sequence[int],
        active: frozenset[int],
        backlog: Sequence[int] | None = None,
    ) -> frozenset[int]:
        if self.threshold == 0:
            return active | {requester}
        floor = counts[requester] - self.threshold
        pending = backlog or [0] * len(counts)
        return frozenset(w for w in active if counts[w] > floor and not pending[w]) | {requester}

    def candidates(self, requester: int, allowed: frozenset[int]) -> list[int]:
        fitting = super().candidates(requester, allowed)
        if not self.multi_node:
            return fitting
        phase = self.generation % 2
        in_phase = [i for i in fitting if self.pool_origin[i] % 2 == phase]
        return in_phase or fitting
