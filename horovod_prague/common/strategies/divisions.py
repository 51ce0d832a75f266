"""Divisions: ways of splitting ranks into disjoint groups, and the helpers strategies share.

A *group* is a sorted tuple of ranks; a *division* is a tuple of disjoint groups covering
the ranks it was made from.

    >>> chunk([3, 1, 2, 0], 2)
    ((0, 2), (1, 3))
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from ..topology import Topology

Group = tuple[int, ...]
Division = tuple[Group, ...]


def chunk(order: Sequence[int], k: int) -> Division:
    """Cut ``order`` into consecutive groups of ``k``.

    A remainder of one rank joins the last group; a larger remainder forms its own group.
    """
    groups = [list(order[i : i + k]) for i in range(0, len(order), k)]
    if len(groups) > 1 and len(groups[-1]) == 1:
        groups[-2].extend(groups.pop())
    return canonical(groups)


def canonical(groups: Iterable[Iterable[int]]) -> Division:
    """The one spelling of a division: sorted groups, sorted by their first rank."""
    return tuple(sorted(tuple(sorted(g)) for g in groups))


def group_of(division: Division, rank: int) -> Group:
    for group in division:
        if rank in group:
            return group
    raise KeyError(f"rank {rank} is in no group of {division}")


def random_division(ranks: Sequence[int], k: int, rng: random.Random) -> Division:
    order = list(ranks)
    rng.shuffle(order)
    return chunk(order, k)


def intra_division(topology: Topology, k: int, rng: random.Random) -> Division:
    """Groups inside nodes as far as possible; leftovers of every node are grouped together."""
    nodes = []
    for node in range(topology.cross_size):
        ranks = list(topology.ranks_on(node))
        rng.shuffle(ranks)
        nodes.append(ranks)
    return chunk(whole_groups_first(nodes, k), k)


def whole_groups_first(nodes: Sequence[Sequence[int]], k: int) -> list[int]:
    """The nodes' ranks in an order that ``chunk`` cuts into groups inside nodes wherever a
    node has ``k`` ranks left, then groups of the leftovers of every node.

    >>> whole_groups_first([[0], [1, 2], [3, 4, 5]], 2)
    [1, 2, 3, 4, 0, 5]
    """
    whole: list[int] = []
    leftovers: list[int] = []
    for ranks in nodes:
        cut = len(ranks) - len(ranks) % k
        whole += ranks[:cut]
        leftovers += ranks[cut:]
    return whole + leftovers


def inter_division(topology: Topology, k: int, rng: random.Random) -> Division:
    """Groups that take consecutive ranks from different nodes (one per node where possible)."""
    per_node = [list(topology.ranks_on(n)) for n in range(topology.cross_size)]
    for ranks in per_node:
        rng.shuffle(ranks)
    order: list[int] = []
    for local in range(topology.local_size):
        nodes = [n for n in range(topology.cross_size) if local < len(per_node[n])]
        rng.shuffle(nodes)
        order.extend(per_node[n][local] for n in nodes)
    return chunk(order, k)


def is_connected(size: int, groups: Iterable[Group]) -> bool:
    """Whether the ranks 0..size-1 form one component when every group links its members."""
    parent = list(range(size))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for group in groups:
        for other in group[1:]:
            parent[find(other)] = find(group[0])
    return len({find(r) for r in range(size)}) == 1


def distinct_groups(divisions: Iterable[Division], size: int) -> tuple[Group, ...]:
    """Each group of two or more ranks, short of the world, once, in order of appearance."""
    seen: dict[Group, None] = {}
    for division in divisions:
        for group in division:
            if 1 < len(group) < size:
                seen.setdefault(group)
    return tuple(seen)


def restrict(division: Division, allowed: Iterable[int]) -> list[Group]:
    """The groups of ``division`` whose members are all in ``allowed``."""
    allowed = set(allowed)
    return [g for g in division if allowed.issuperset(g)]
