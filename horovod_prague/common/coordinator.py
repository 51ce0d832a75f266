"""The Group Generator service: a TCP server thread on rank 0 and the client every rank uses.

>>> from horovod_prague.common.strategies import AllreduceStrategy
>>> from horovod_prague.common.topology import Topology
>>> from horovod_prague.common.group_generator import GroupGenerator
>>> from horovod_prague.common.protocol import new_token
>>> token = new_token()
>>> gg = GroupGenerator(AllreduceStrategy(Topology(2, 2), 2, 1, 0))
>>> with GroupGeneratorServer(gg, token, fingerprint="f") as server:
...     with GroupGeneratorClient(*server.address, token, rank=1, timeout=5) as client:
...         client.hello("f")
...         client.next_group()
(0, 1)
"""

from __future__ import annotations

import itertools
import socket
import threading
from typing import Any

from .group_generator import GroupGenerator
from .protocol import (
    OPS,
    VERSION,
    CoordinatorTimeout,
    ProtocolError,
    receive,
    send,
)
from .strategies import Group


class GroupGeneratorServer:
    """Serves a GroupGenerator to every rank (rank 0 included) from a daemon thread."""

    def __init__(
        self,
        generator: GroupGenerator,
        token: bytes,
        fingerprint: str,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.generator = generator
        self.token = token
        self.fingerprint = fingerprint
        self._listener = socket.create_server((host, port))
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="prague-gg", daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._listener.getsockname()[:2]
        return host, port

    def close(self) -> None:
        self._closed.set()
        _quiet_close(self._listener)
        with self._lock:
            for conn in list(self._connections):
                _quiet_close(conn)
        self._thread.join(timeout=5)

    def __enter__(self) -> GroupGeneratorServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._connections.add(conn)
            threading.Thread(
                target=self._serve, args=(conn,), name="prague-gg-conn", daemon=True
            ).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            while not self._closed.is_set():
                try:
                    message = receive(conn, self.token)
                except ProtocolError as e:
                    send(conn, {"v": VERSION, "id": None, "ok": False, "error": str(e)}, self.token)
                    return
                if message is None:
                    return
                send(conn, self._reply(message), self.token)
        except OSError:
            return
        finally:
            with self._lock:
                self._connections.discard(conn)
            _quiet_close(conn)

    def _reply(self, message: dict[str, Any]) -> dict[str, Any]:
        reply: dict[str, Any] = {"v": VERSION, "id": message.get("id"), "ok": True}
        try:
            reply.update(self._dispatch(message))
        except (ValueError, TypeError, KeyError) as e:
            reply.update(ok=False, error=str(e))
        return reply

    def _dispatch(self, message: dict[str, Any]) -> dict[str, Any]:
        op, rank = message.get("op"), message.get("rank")
        if op not in OPS:
            raise ValueError(f"unknown operation {op!r}; known: {', '.join(OPS)}")
        if not isinstance(rank, int) or isinstance(rank, bool):
            raise ValueError(f"'rank' must be an integer, got {rank!r}")
        gg = self.generator
        if op == "hello":
            if message.get("fingerprint") != self.fingerprint:
                raise ValueError(
                    f"rank {rank} has Prague options {message.get('fingerprint')!r} but rank 0 "
                    f"has {self.fingerprint!r}: every rank must use the same options"
                )
            return {"size": gg.size}
        if op == "next":
            return {"group": list(gg.next_group(rank))}
        if op == "sync":
            sync_id = message.get("sync")
            if not isinstance(sync_id, int) or sync_id < 1:
                raise ValueError(f"'sync' must be a positive integer, got {sync_id!r}")
            groups = gg.sync(rank, sync_id)
            return {"groups": None if groups is None else [list(g) for g in groups]}
        if op == "finish":
            return {"groups": [list(g) for g in gg.finish(rank)]}
        return {"counts": list(gg.counts), "generations": gg.generations}


class GroupGeneratorClient:
    """One rank's connection to the Group Generator; every request has ``timeout`` seconds."""

    def __init__(self, host: str, port: int, token: bytes, rank: int, timeout: float) -> None:
        self.where = f"{host}:{port}"
        self.token = token
        self.rank = rank
        self.timeout = timeout
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise ConnectionError(
                f"rank {rank} could not reach the Prague Group Generator on rank 0 at "
                f"{self.where} within {timeout:g}s: {e}. Check that rank 0 is running and "
                "that HOROVOD_PRAGUE_COORDINATOR_ADDR names an address this host can reach."
            ) from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.settimeout(timeout)

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        with self._lock:
            request_id = next(self._ids)
            message = {"v": VERSION, "op": op, "rank": self.rank, "id": request_id, **fields}
            try:
                send(self._sock, message, self.token)
                reply = receive(self._sock, self.token)
            except TimeoutError:
                raise CoordinatorTimeout(
                    f"rank {self.rank}: the Prague Group Generator at {self.where} did not "
                    f"answer {op!r} within {self.timeout:g}s (HOROVOD_PRAGUE_TIMEOUT)"
                ) from None
            except OSError as e:
                raise ConnectionError(
                    f"rank {self.rank}: lost the connection to the Prague Group Generator at "
                    f"{self.where} during {op!r}: {e}"
                ) from None
        if reply is None:
            raise ConnectionError(
                f"rank {self.rank}: the Prague Group Generator at {self.where} closed the "
                f"connection during {op!r} (has rank 0 exited?)"
            )
        if not reply.get("ok"):
            raise RuntimeError(
                f"rank {self.rank}: the Prague Group Generator refused {op!r}: {reply.get('error')}"
            )
        if reply.get("id") != request_id:
            raise ProtocolError(
                f"reply id {reply.get('id')!r} does not match request id {request_id}"
            )
        return reply

    def hello(self, fingerprint: str) -> None:
        self.request("hello", fingerprint=fingerprint)

    def next_group(self) -> Group:
        return tuple(self.request("next")["group"])

    def sync(self, sync_id: int) -> list[Group] | None:
        groups = self.request("sync", sync=sync_id)["groups"]
        return None if groups is None else [tuple(g) for g in groups]

    def finish(self) -> list[Group]:
        return [tuple(g) for g in self.request("finish")["groups"]]

    def stats(self) -> dict[str, Any]:
        return self.request("stats")

    def close(self) -> None:
        _quiet_close(self._sock)

    def __enter__(self) -> GroupGeneratorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _quiet_close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
