"""Check that every rank runs with the same Prague options before Horovod starts.

Prague's options decide the process sets each rank registers in ``hvd.init``. Ranks that
disagree register different sets, and Gloo's initialization then fails only after its own
timeout, with an error that names no option. Under ``horovodrun --gloo`` the launcher's
rendezvous server (an HTTP key-value store every rank can reach) is up before ``hvd.init``:
each rank puts its options there, reads every other rank's, and raises, naming the options
that differ, before any collective. Other launchers (MPI) have no such store; there the check
runs through Horovod after ``init`` (``runtime._agree_and_lay_out``). Each rank also puts where
it runs (the first rank and the size of its node), so that every rank learns the whole layout
of the job, nodes of different sizes included, before it registers its process sets.

    >>> differing({"seed": 1, "group_size": 2}, {"seed": 1, "group_size": 4})
    ['group_size']

On one rank, an ``init`` called again while the job runs must repeat the first call's options
and Horovod arguments (``InitCall.check_same``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from .config import PragueConfig
from .topology import Topology

SCOPE = "prague-options"
NODE = "node"
"""Not an option: where the rank runs, as [first rank of its node, ranks on its node]."""
_inits = 0


def differing(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> list[str]:
    """The option names whose values differ, sorted."""
    return sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))


def check_before_init(
    options: Mapping[str, Any], timeout: float, env: Mapping[str, str] | None = None
) -> Topology | None:
    """Compare ``options`` with every rank's through the Gloo rendezvous store.

    ``env``: the launcher's variables (default ``os.environ``).

    Returns the job's layout, read from every rank's node, when all agree; None when there is
    no store (not a Gloo launch) or when some rank's options did not arrive within ``timeout``
    (Horovod's own start-up then reports the missing rank). Raises ValueError, on every rank,
    naming the options that differ.
    """
    global _inits
    env = os.environ if env is None else env
    addr, port = env.get("HOROVOD_GLOO_RENDEZVOUS_ADDR"), env.get("HOROVOD_GLOO_RENDEZVOUS_PORT")
    rank, size = env.get("HOROVOD_RANK"), env.get("HOROVOD_SIZE")
    if not (addr and port and rank and size):
        return None
    _inits += 1
    base = f"http://{addr}:{port}/{SCOPE}"
    me = int(rank)
    local_rank, local_size = env.get("HOROVOD_LOCAL_RANK"), env.get("HOROVOD_LOCAL_SIZE")
    node = [me - int(local_rank), int(local_size)] if local_rank and local_size else None
    body = json.dumps({**options, NODE: node}, sort_keys=True)
    options = {k: v for k, v in json.loads(body).items() if k != NODE}  # as others' arrive
    try:
        _put(f"{base}/{me}.{_inits}", body.encode())
    except OSError:  # the store is gone or unreachable: Horovod's start-up will say so
        return None
    nodes: dict[int, int] | None = None if node is None else {node[0]: node[1]}
    deadline = time.monotonic() + timeout
    delay = 0.005
    for other in range(int(size)):
        if other == me:
            continue
        while (raw := _get_or_none(f"{base}/{other}.{_inits}")) is None:
            if time.monotonic() > deadline:
                return None
            time.sleep(delay)
            delay = min(2 * delay, 0.1)
        theirs = json.loads(raw)
        their_node = theirs.pop(NODE, None)
        if nodes is not None and their_node is not None:
            nodes[their_node[0]] = their_node[1]
        else:
            nodes = None
        names = differing(options, theirs)
        if names:
            details = ", ".join(f"{k}={options.get(k)!r} vs {theirs.get(k)!r}" for k in names)
            raise ValueError(
                f"Prague options differ between rank {me} and rank {other}: {details}. "
                "Every rank must use the same options (same flags, HOROVOD_PRAGUE_* "
                "variables and hvd.init arguments)."
            )
    return None if nodes is None else Topology.of_node_starts(nodes, int(size))


def _put(url: str, body: bytes) -> None:
    request = urllib.request.Request(url, data=body, method="PUT")
    with urllib.request.urlopen(request, timeout=10):
        pass


def _get_or_none(url: str) -> bytes | None:
    """The stored value, or None while it is not there (or the store does not answer)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.read()
    except (urllib.error.URLError, OSError):
        return None


@dataclasses.dataclass(frozen=True)
class InitCall:
    """The arguments of the ``init`` that started this job: a later call must repeat them,
    and an elastic reset initializes with them again."""

    comm: Any
    process_sets: Any
    prague_options: dict[str, Any]
    config: PragueConfig

    def compared(self) -> dict[str, Any]:
        """The options and Horovod arguments, as a repeated ``init`` must give them."""
        return {
            **dataclasses.asdict(self.config),
            "comm": self.comm,
            "process_sets": _comparable_sets(self.process_sets),
        }

    def check_same(self, again: InitCall) -> None:
        """ValueError naming each option or Horovod argument of ``again`` that differs from
        this call's, with both values."""
        before, now = self.compared(), again.compared()
        differing = [k for k in now if now[k] != before[k]]
        if differing:
            details = ", ".join(f"{k}={now[k]!r} (was {before[k]!r})" for k in differing)
            raise ValueError(
                f"hvd.init() was called again with different options: {details}. Horovod "
                "and Prague are already running with the first call's; call shutdown() "
                "before initializing with others"
            )


def _comparable_sets(process_sets: Any) -> Any:
    """Horovod's ``process_sets`` argument as two calls of ``init`` compare it: sets given
    by ranks by their ranks, others (an MPI communicator's) as the objects."""
    if process_sets is None or isinstance(process_sets, str):
        return process_sets
    return [s if s.ranks is None else sorted(s.ranks) for s in process_sets]
