"""The patched Horovod's launcher servers: the Gloo rendezvous server clears every scope whose
ranks have all finished, whatever order the ranks finish the scopes in (``patches/0013``), and
it and the launcher's services queue every connection that arrives at once (``patches/0015``)."""

import selectors
import socket
import time
import urllib.error
import urllib.request

import pytest

http_server = pytest.importorskip("horovod.runner.http.http_server")
hosts = pytest.importorskip("horovod.runner.common.util.hosts")
network = pytest.importorskip("horovod.runner.common.util.network")
secret = pytest.importorskip("horovod.runner.common.util.secret")


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


def _connects_completed(port: int, attempts: int, wait: float = 5.0) -> int:
    """How many of ``attempts`` connections to a listener that accepts none complete the
    handshake within ``wait`` seconds. The rest had their SYN dropped by a full accept queue;
    their retries meet the same full queue, so waiting longer does not change the count."""
    sockets: list[socket.socket] = []
    with selectors.DefaultSelector() as selector:
        try:
            for _ in range(attempts):
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", port))
                sockets.append(s)
                selector.register(s, selectors.EVENT_WRITE)
            completed = 0
            deadline = time.monotonic() + wait
            while selector.get_map() and (left := deadline - time.monotonic()) > 0:
                for key, _ in selector.select(left):
                    selector.unregister(key.fileobj)
                    completed += key.fileobj.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
            return completed
        finally:
            for s in sockets:
                s.close()


@pytest.mark.parametrize(
    "server_class",
    [http_server.RendezvousHTTPServer, http_server.KVStoreHTTPServer],
    ids=["rendezvous", "kv-store"],
)
def test_the_rendezvous_server_queues_every_worker_that_connects_at_once(server_class):
    """``patches/0015``: every worker polls the rendezvous store, one connection per request,
    while it waits for its peers. With socketserver's backlog of 5, connections beyond the
    queue had their SYN dropped while the server was busy, and the worker's request waited
    the kernel's retransmission (seen in CI: the driver's listener full, ``ListenOverflows``
    rising). Here no accept loop runs, so every connection must queue."""
    server = server_class(("127.0.0.1", 0), http_server.KVStoreHandler, False)
    try:
        assert _connects_completed(server.server_address[1], 64) == 64
    finally:
        server.server_close()


def test_the_launchers_services_queue_every_task_that_connects_at_once():
    """The same for the launcher's driver, task and elastic notification services."""
    service = network.BasicService("test", secret.make_secret_key(), nics=None)
    service._server.shutdown()  # stop accepting; the socket keeps listening
    try:
        assert _connects_completed(service._port, 64) == 64
    finally:
        service.shutdown()
