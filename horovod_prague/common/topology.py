"""The shape of the job: how many ranks, and how they sit on nodes.

Horovod numbers ranks node by node, so each node holds a consecutive run of ranks. Nodes
usually hold the same number of ranks (``Topology(size, local_size)``); ``Topology.of_nodes``
describes nodes of different sizes, as ``horovodrun -H a:4,b:2`` starts.

    >>> t = Topology(size=8, local_size=4)
    >>> t.cross_size, t.node_of(5), t.ranks_on(1)
    (2, 1, (4, 5, 6, 7))
    >>> u = Topology.of_nodes([4, 2])
    >>> u.size, u.cross_size, u.node_of(4), u.ranks_on(1), u.uniform
    (6, 2, 1, (4, 5), False)
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import os
from collections.abc import Mapping, Sequence


@dataclasses.dataclass(frozen=True)
class Topology:
    size: int
    local_size: int
    """Ranks on each node; on nodes of different sizes, on the largest."""
    node_sizes: tuple[int, ...] = ()
    """Ranks on each node, in node order (filled in from ``local_size`` when not given)."""

    def __post_init__(self) -> None:
        if self.size < 1 or self.local_size < 1:
            raise ValueError(f"topology: size and local_size must be positive, got {self}")
        if not self.node_sizes:
            if self.size % self.local_size:
                raise ValueError(
                    f"topology: {self.size} ranks do not split evenly into nodes of "
                    f"{self.local_size}; give the ranks of each node (Topology.of_nodes)"
                )
            uniform = (self.local_size,) * (self.size // self.local_size)
            object.__setattr__(self, "node_sizes", uniform)
        elif sum(self.node_sizes) != self.size or max(self.node_sizes) != self.local_size:
            raise ValueError(f"topology: node sizes {self.node_sizes} do not make {self}")
        if min(self.node_sizes) < 1:
            raise ValueError(f"topology: every node runs a rank, got {self.node_sizes}")

    @classmethod
    def of_nodes(cls, node_sizes: Sequence[int]) -> Topology:
        """The topology of nodes running ``node_sizes[i]`` ranks each, in rank order."""
        sizes = tuple(int(n) for n in node_sizes)
        if not sizes:
            raise ValueError("topology: no nodes")
        return cls(sum(sizes), max(sizes), sizes)

    @classmethod
    def of_node_starts(cls, nodes: Mapping[int, int], size: int) -> Topology | None:
        """The topology of nodes given as {first rank: ranks on it}, or None unless they
        cover ranks 0..size-1 exactly, one after another.

        >>> Topology.of_node_starts({4: 2, 0: 4}, 6)
        Topology(size=6, local_size=4, node_sizes=(4, 2))
        >>> Topology.of_node_starts({0: 4, 3: 3}, 6) is None
        True
        """
        if not nodes:
            return None
        starts = sorted(nodes)
        ends = [start + nodes[start] for start in starts]
        if starts[0] != 0 or ends[-1] != size or starts[1:] != ends[:-1]:
            return None
        return cls.of_nodes([nodes[start] for start in starts])

    @property
    def cross_size(self) -> int:
        return len(self.node_sizes)

    @property
    def uniform(self) -> bool:
        """Whether every node runs the same number of ranks."""
        return len(set(self.node_sizes)) == 1

    def _starts(self) -> list[int]:
        return [0, *itertools.accumulate(self.node_sizes)]

    def node_of(self, rank: int) -> int:
        if not 0 <= rank < self.size:
            raise ValueError(f"topology: rank {rank} is not in a job of {self.size}")
        return bisect.bisect_right(self._starts(), rank) - 1

    def ranks_on(self, node: int) -> tuple[int, ...]:
        start = self._starts()[node]
        return tuple(range(start, start + self.node_sizes[node]))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Topology | None:
        """The topology the launcher announced (horovodrun or Open MPI), or None if unknown.

        A rank learns only its own node's size from the launcher. Where horovodrun says the
        job spans nodes of different sizes (``HOROVOD_CROSS_SIZE`` disagrees with an equal
        split), the whole layout is unknown here: None (``agreement.check_before_init`` learns
        it from every rank under Gloo).
        """
        env = os.environ if env is None else env
        for size_key, local_key in (
            ("HOROVOD_SIZE", "HOROVOD_LOCAL_SIZE"),
            ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"),
            ("PMI_SIZE", "MPI_LOCALNRANKS"),
        ):
            if env.get(size_key) and env.get(local_key):
                size, local_size = int(env[size_key]), int(env[local_key])
                if size % local_size:
                    return None
                topology = cls(size, local_size)
                cross = env.get("HOROVOD_CROSS_SIZE") if size_key == "HOROVOD_SIZE" else None
                if cross and int(cross) != topology.cross_size:
                    return None
                return topology
        return None
