"""The shape of the job: how many ranks, and how they sit on nodes.

Horovod numbers ranks node by node, so rank ``r`` sits on node ``r // local_size``.

    >>> t = Topology(size=8, local_size=4)
    >>> t.cross_size, t.node_of(5), t.ranks_on(1)
    (2, 1, (4, 5, 6, 7))
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class Topology:
    size: int
    local_size: int

    def __post_init__(self) -> None:
        if self.size < 1 or self.local_size < 1:
            raise ValueError(f"topology: size and local_size must be positive, got {self}")
        if self.size % self.local_size:
            raise ValueError(
                f"topology: {self.size} ranks do not split evenly into nodes of "
                f"{self.local_size}; Prague needs the same number of ranks on every node"
            )

    @property
    def cross_size(self) -> int:
        return self.size // self.local_size

    def node_of(self, rank: int) -> int:
        return rank // self.local_size

    def ranks_on(self, node: int) -> tuple[int, ...]:
        start = node * self.local_size
        return tuple(range(start, start + self.local_size))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Topology | None:
        """The topology the launcher announced (horovodrun or Open MPI), or None if unknown."""
        env = os.environ if env is None else env
        for size_key, local_key in (
            ("HOROVOD_SIZE", "HOROVOD_LOCAL_SIZE"),
            ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"),
            ("PMI_SIZE", "MPI_LOCALNRANKS"),
        ):
            if env.get(size_key) and env.get(local_key):
                topology = cls(int(env[size_key]), int(env[local_key]))
                cross = env.get("HOROVOD_CROSS_SIZE") if size_key == "HOROVOD_SIZE" else None
                if cross and int(cross) != topology.cross_size:
                    raise ValueError(
                        f"topology: this node runs {topology.local_size} of {topology.size} "
                        f"ranks, but the job spans {cross} nodes: the nodes run different "
                        "numbers of ranks (as with -H a:4,b:2). Prague needs the same number "
                        "on every node"
                    )
                return topology
        return None
