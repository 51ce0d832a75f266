"""Check that every rank runs with the same Prague options before Horovod starts.

Prague's options decide the process sets each rank registers in ``hvd.init``. Ranks that
disagree register different sets, and Gloo's initialization then fails only after its own
timeout, with an error that names no option. Under ``horovodrun --gloo`` the launcher's
rendezvous server (an HTTP key-value store every rank can reach) is up before ``hvd.init``:
each rank puts its options there, reads every other rank's, and raises, naming the options
that differ, before any collective. Other launchers (MPI) have no such store; there the check
runs through Horovod after ``init`` (``runtime._check_agreement``).

    >>> differing({"seed": 1, "group_size": 2}, {"seed": 1, "group_size": 4})
    ['group_size']
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

SCOPE = "prague-options"
RANKS_ON_NODE = "ranks_on_this_node"
"""Compared with the options: Prague needs the same number of ranks on every node."""
_inits = 0


def differing(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> list[str]:
    """The option names whose values differ, sorted."""
    return sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))


def check_before_init(
    options: Mapping[str, Any], timeout: float, env: Mapping[str, str] | None = None
) -> bool:
    """Compare ``options`` with every rank's through the Gloo rendezvous store.

    The launcher's count of ranks on this node (``HOROVOD_LOCAL_SIZE``) is compared too, so
    that every rank of a job whose nodes run different numbers of ranks stops.

    ``env``: the launcher's variables (default ``os.environ``).

    Returns False when there is no store (not a Gloo launch) or when some rank's options did
    not arrive within ``timeout`` (Horovod's own start-up then reports the missing rank), True
    when all agree. Raises ValueError, on every rank, naming the options that differ.
    """
    global _inits
    env = os.environ if env is None else env
    addr, port = env.get("HOROVOD_GLOO_RENDEZVOUS_ADDR"), env.get("HOROVOD_GLOO_RENDEZVOUS_PORT")
    rank, size = env.get("HOROVOD_RANK"), env.get("HOROVOD_SIZE")
    if not (addr and port and rank and size):
        return False
    _inits += 1
    base = f"http://{addr}:{port}/{SCOPE}"
    me = int(rank)
    facts = {**options, RANKS_ON_NODE: env.get("HOROVOD_LOCAL_SIZE")}
    body = json.dumps(facts, sort_keys=True)
    options = json.loads(body)  # compared as the other ranks' arrive: through JSON
    try:
        _put(f"{base}/{me}.{_inits}", body.encode())
    except OSError:  # the store is gone or unreachable: Horovod's start-up will say so
        return False
    deadline = time.monotonic() + timeout
    delay = 0.005
    for other in range(int(size)):
        if other == me:
            continue
        while (raw := _get_or_none(f"{base}/{other}.{_inits}")) is None:
            if time.monotonic() > deadline:
                return False
            time.sleep(delay)
            delay = min(2 * delay, 0.1)
        theirs = json.loads(raw)
        names = differing(options, theirs)
        if RANKS_ON_NODE in names:
            raise ValueError(
                f"the nodes run different numbers of ranks: rank {me}'s node runs "
                f"{options.get(RANKS_ON_NODE)}, rank {other}'s runs {theirs.get(RANKS_ON_NODE)} "
                "(as with -H a:4,b:2). Prague needs the same number of ranks on every node"
            )
        if names:
            details = ", ".join(f"{k}={options.get(k)!r} vs {theirs.get(k)!r}" for k in names)
            raise ValueError(
                f"Prague options differ between rank {me} and rank {other}: {details}. "
                "Every rank must use the same options (same flags, HOROVOD_PRAGUE_* "
                "variables and hvd.init arguments)."
            )
    return True


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
