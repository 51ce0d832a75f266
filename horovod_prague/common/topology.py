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

NODES_VAR = "HOROVOD_PRAGUE_NODES"
"""Ranks on each host, in rank order (``4,2``), as ``horovodrun`` places an MPI job on a fixed
host list: how a rank learns the layout before ``init`` where no Gloo store tells it."""

_RANK_KEYS = (
    ("HOROVOD_SIZE", "HOROVOD_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_LOCAL_RANK"),
    (
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
    ),
    ("PMI_SIZE", "PMI_RANK", "MPI_LOCALNRANKS", "MPI_LOCALRANKID"),
)
"""The launchers' variables: (size, rank, ranks on this node, rank on this node)."""

_NODE_COUNT_KEYS = {
    "HOROVOD_SIZE": "HOROVOD_CROSS_SIZE",
    "OMPI_COMM_WORLD_SIZE": "OMPI_MCA_orte_num_nodes",  # Open MPI 3 and 4: nodes given ranks
}
"""The variable, where a launcher sets one, that counts the job's nodes, by its size key."""


def node_sizes_of(hosts: str, num_proc: int) -> tuple[int, ...] | None:
    """The ranks on each host of a ``horovodrun -H`` list for ``num_proc`` ranks, as Horovod's
    ``mpirun -map-by slot`` places them: each host's slots in turn (hosts of no slot skipped).
    None if the slots are too few.

    >>> node_sizes_of("h1:4,h2:2", 6), node_sizes_of("h1:4,h2:4", 6), node_sizes_of("a,b", 2)
    ((4, 2), (4, 2), (1, 1))
    >>> node_sizes_of("h1:0,h2:2", 2), node_sizes_of("h1:2,h2:2", 6)
    ((2,), None)
    """
    sizes = []
    left = num_proc
    for host in hosts.split(","):
        if left == 0:
            break
        slots = int(host.rpartition(":")[2]) if ":" in host else 1
        if slots > 0:
            sizes.append(min(slots, left))
            left -= sizes[-1]
    return tuple(sizes) if left == 0 and sizes else None


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

        ``horovodrun --prague`` names every host's ranks (``NODES_VAR``). Otherwise a rank
        learns only its own node's size from the launcher. Where the launcher's variables
        show nodes of different sizes (``uneven_hosts_in_env``: this node's size does not
        divide the job, or the launcher's node count, ``HOROVOD_CROSS_SIZE`` or Open MPI's,
        disagrees with an equal split), the whole layout is unknown here: None
        (``agreement.check_before_init`` learns it from every rank under Gloo).
        """
        env = os.environ if env is None else env
        if env.get(NODES_VAR):
            return cls.placed(env[NODES_VAR], env)
        counts = _launcher_counts(env)
        if counts is None or uneven_hosts_in_env(env):
            return None
        size, local_size, _ = counts
        return cls(size, local_size)

    @classmethod
    def placed(cls, nodes: str, env: Mapping[str, str]) -> Topology:
        """The layout ``horovodrun`` announced (``NODES_VAR``), checked against where the
        launcher put this rank; ValueError if they differ (a launcher that maps ranks
        otherwise, such as ``mpirun --map-by node``).

        >>> env = {"OMPI_COMM_WORLD_SIZE": "6", "OMPI_COMM_WORLD_RANK": "4",
        ...        "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}
        >>> Topology.placed("4,2", env).node_sizes
        (4, 2)
        >>> Topology.placed("3,3", env)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: ... rank 4 would be rank 1 of 3 on its host, but the launcher made it rank 0 ...
        """
        topology = cls.of_nodes([int(n) for n in nodes.split(",")])
        announced = f"the job's hosts hold {nodes} ranks ({NODES_VAR}, from horovodrun's host list)"
        for size_key, rank_key, local_size_key, local_rank_key in _RANK_KEYS:
            if not all(env.get(k) for k in (size_key, rank_key, local_size_key, local_rank_key)):
                continue
            rank, size = int(env[rank_key]), int(env[size_key])
            if size != topology.size:
                raise ValueError(f"{announced}, {topology.size} in all, but {size} were started")
            node = topology.node_of(rank)
            expected = (rank - topology.ranks_on(node)[0], topology.node_sizes[node])
            actual = (int(env[local_rank_key]), int(env[local_size_key]))
            if expected != actual:
                raise ValueError(
                    f"{announced}, so rank {rank} would be rank {expected[0]} of {expected[1]} "
                    f"on its host, but the launcher made it rank {actual[0]} of {actual[1]}: "
                    "launch with -map-by slot (horovodrun's default) or equal slots"
                )
            break
        return topology


def _launcher_counts(env: Mapping[str, str]) -> tuple[int, int, int | None] | None:
    """(ranks in the job, ranks on this node, nodes or None) from the first launcher's
    variables found, or None if no launcher set them."""
    for size_key, _, local_key, _ in _RANK_KEYS:
        if env.get(size_key) and env.get(local_key):
            nodes = env.get(_NODE_COUNT_KEYS.get(size_key, ""))
            return int(env[size_key]), int(env[local_key]), int(nodes) if nodes else None
    return None


def uneven_hosts_in_env(env: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """(ranks on this node, ranks in the job) where the launcher's own variables show, on
    this rank alone, that the job's hosts hold different numbers of ranks: this host's share
    does not divide the job, or times the launcher's node count is not the job. Else None
    (hosts may still differ: a host of 2 in a job of 6 cannot tell 4 + 2 from 2 + 2 + 2
    without a node count).

    >>> uneven_hosts_in_env({"OMPI_COMM_WORLD_SIZE": "6", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"})
    (4, 6)
    >>> env = {"OMPI_COMM_WORLD_SIZE": "6", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    >>> uneven_hosts_in_env(env), uneven_hosts_in_env({**env, "OMPI_MCA_orte_num_nodes": "2"})
    (None, (2, 6))
    >>> uneven_hosts_in_env({**env, "OMPI_MCA_orte_num_nodes": "3"})
    """
    env = os.environ if env is None else env
    counts = _launcher_counts(env)
    if counts is None:
        return None
    size, local_size, nodes = counts
    if size % local_size or (nodes is not None and nodes * local_size != size):
        return local_size, size
    return None
