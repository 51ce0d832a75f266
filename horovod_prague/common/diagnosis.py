"""What a rank says, in its error, about ranks and hosts that are gone.

Read from the Group Generator's ``stats`` (which ranks' connections ended before they
finished, who has been silent for how long, who waits on what) and the job's host names, one
per rank. No Horovod here: unit-testable in milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence

from .strategies import Group


def ranks_by_host(hosts: Sequence[str]) -> dict[str, list[int]]:
    """Each host's ranks, hosts in order of their first rank.

    >>> ranks_by_host(["a", "a", "b", "b"])
    {'a': [0, 1], 'b': [2, 3]}
    """
    found: dict[str, list[int]] = {}
    for rank, host in enumerate(hosts):
        found.setdefault(host, []).append(rank)
    return found


LOSS_SETTLE_S = 0.5
"""How long a rank that finds some of a host's ranks lost waits before it asks again: the
processes of a host that goes down drop their connections within milliseconds of each
other, but the Group Generator's thread may have seen only the first."""


def partly_lost(lost: Sequence[int], hosts: Sequence[str]) -> bool:
    """Whether some host has lost some of its ranks but not all (yet).

    >>> partly_lost([2], ["h1", "h1", "h2", "h2"]), partly_lost([2, 3], ["h1", "h1", "h2", "h2"])
    (True, False)
    """
    if not lost or len(hosts) <= max(lost):
        return False
    return any(
        0 < sum(r in lost for r in ranks) < len(ranks) for ranks in ranks_by_host(hosts).values()
    )


def gone(lost: Sequence[int], hosts: Sequence[str]) -> str:
    """A sentence on ranks whose Group Generator connection ended before they finished: a
    host all of whose ranks are among them is named as lost.

    >>> gone([2, 3], ["h1", "h1", "h2", "h2"]).split(":")[0]
    'Host h2 (ranks [2, 3]) is most likely lost'
    >>> gone([3], ["h1", "h1", "h2", "h2"]).split(":")[1]
    ' its process most likely died'
    """
    if not lost:
        return ""
    if len(hosts) <= max(lost):
        return (
            f"Ranks {sorted(lost)} lost their connection to the Group Generator without "
            "finishing: their processes or hosts are most likely gone"
        )
    parts = []
    for host, ranks in ranks_by_host(hosts).items():
        mine = [r for r in ranks if r in lost]
        if mine == ranks and len(set(hosts)) > 1:
            parts.append(
                f"Host {host} (ranks {ranks}) is most likely lost: every one of its ranks lost "
                "its connection to the Group Generator without finishing"
            )
        elif mine:
            who = f"Rank {mine[0]}" if len(mine) == 1 else f"Ranks {mine}"
            parts.append(
                f"{who} (host {host}) lost {'its' if len(mine) == 1 else 'their'} connection "
                "to the Group Generator without finishing: "
                f"{'its process' if len(mine) == 1 else 'their processes'} most likely died"
            )
    return "; ".join(parts)


def silent_hosts(
    hosts: Sequence[str],
    silence: Sequence[float | None],
    waits: Sequence[Group | None],
    longer_than: float,
) -> str:
    """A sentence on hosts (of several) all of whose ranks have been silent towards the Group
    Generator for over ``longer_than`` seconds while waiting on no group it knows of: cut off,
    or down without closing their connections.

    >>> hosts, silence = ["h1", "h1", "h2", "h2"], [0.1, 7.0, 7.5, 7.2]
    >>> silent_hosts(hosts, silence, [None, (0, 1), None, None], 1.5).split(":")[1]
    ' none of its ranks has been heard from for 7.2 s or more'
    """
    if len(set(hosts)) < 2 or not (len(hosts) == len(silence) == len(waits)):
        return ""
    parts = []
    for host, ranks in ranks_by_host(hosts).items():
        quiet = [silence[r] for r in ranks if waits[r] is None]
        if len(quiet) == len(ranks) and all(s is not None and s > longer_than for s in quiet):
            least = min(s for s in quiet if s is not None)
            parts.append(
                f"Host {host} (ranks {ranks}) is most likely lost or cut off: none of its "
                f"ranks has been heard from for {least:.1f} s or more"
            )
    return "; ".join(parts)


def unreachable_generator(hosts: Sequence[str]) -> str:
    """Where the Group Generator (rank 0) did not answer: rank 0's host and its ranks.

    >>> unreachable_generator(["h1", "h1", "h2"])
    'rank 0 may be the one that stopped, or its host h1 (ranks [0, 1]) may be lost or cut off'
    """
    if not hosts or len(set(hosts)) < 2:
        return "rank 0 may be the one that stopped"
    ranks = ranks_by_host(hosts)[hosts[0]]
    return (
        f"rank 0 may be the one that stopped, or its host {hosts[0]} (ranks {ranks}) may be "
        "lost or cut off"
    )
