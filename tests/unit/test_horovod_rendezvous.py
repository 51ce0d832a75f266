"""The patched Horovod's Gloo rendezvous server (``patches/0013``): every scope whose ranks
have all finished is cleared, whatever order the ranks finish the scopes in."""

import urllib.error
import urllib.request

import pytest

http_server = pytest.importorskip("horovod.runner.http.http_server")
hosts = pytest.importorskip("horovod.runner.common.util.hosts")


def _request(port: int, method: str, path: str, body: bytes | None = None) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as e:
        return e.code


def test_the_rendezvous_server_clears_every_finished_scope():
    """2 ranks on one host: rank 0 finishes its global, local and cross rendezvous before rank
    1 finishes any. Before the patch, rank 1 completing ``global`` forgot that rank 0 had
    finished ``local_a``, so ``local_a`` kept both addresses, and a second ``init`` in the
    same processes could read the stale one (Gloo: "Connect timeout")."""
    plan = [hosts.SlotInfo("a", rank, rank, 0, 2, 2, 1) for rank in (0, 1)]
    server = http_server.RendezvousServer()
    port = server.start()
    try:
        server.init(plan)
        scopes = {0: ["global", "local_a", "cross_0"], 1: ["global", "local_a", "cross_1"]}
        for rank, names in scopes.items():
            for scope in names:
                assert _request(port, "PUT", f"{scope}/{rank}", b"address") == 200
        for rank, names in scopes.items():
            for scope in names:
                assert _request(port, "DELETE", f"{scope}/{rank}") == 200
        left = [
            f"{scope}/{rank}"
            for rank, names in scopes.items()
            for scope in names
            if _request(port, "GET", f"{scope}/{rank}") == 200
        ]
        assert left == []
    finally:
        server.stop()
