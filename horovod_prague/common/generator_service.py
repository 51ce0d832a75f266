"""The Group Generator service: one server thread on rank 0 (its client: ``generator_client``).

>>> from horovod_prague.common.strategies import AllreduceStrategy
>>> from horovod_prague.common.topology import Topology
>>> from horovod_prague.common.group_generator import GroupGenerator
>>> from horovod_prague.common.protocol import new_token
>>> token = new_token()
>>> from horovod_prague.common.generator_client import GroupGeneratorClient
>>> gg = GroupGenerator(AllreduceStrategy(Topology(2, 2), 2, 1, 0))
>>> with GroupGeneratorServer(gg, token, fingerprint="f") as server:
...     with GroupGeneratorClient(*server.address, token, rank=1, timeout=5) as client:
...         client.hello("f")
...         client.next_group()
2
(0, 1)

The server serves every connection from one thread with ``selectors``. A connection must
greet and say ``hello`` within ``handshake_timeout``; ``hello`` binds it to one rank, and a
rank has at most one live connection (a second one is refused, not swapped in; once the first
is closed the rank may connect again). Anything else before ``hello``, a bad frame, or a
request naming another rank is counted in ``rejected`` and closes the connection. Any error
on one connection (a peer that resets it, a failed ``accept``, send or receive) closes that
connection alone: the thread goes on serving the others.
"""

from __future__ import annotations

import collections
import errno
import logging
import math
import selectors
import socket
import threading
import time
from typing import Any

from .group_generator import GroupGenerator, WorldGroup
from .protocol import (
    MAX_FRAME,
    MAX_HELLO_FRAME,
    OPS,
    Channel,
    ProtocolError,
    close_quietly,
    owed_message,
)

log = logging.getLogger(__name__)

REJECTED = (
    "malformed",
    "truncated",
    "version",
    "oversized",
    "bad_mac",
    "out_of_sequence",
    "before_hello",
    "rank_taken",
    "rank_mismatch",
)
"""Why frames are rejected: the keys of ``GroupGeneratorServer.rejected``."""
DROPPED = ("handshake_timeout", "idle_timeout", "stalled", "evicted")
"""Why connections are cut without a bad frame: the keys of ``GroupGeneratorServer.dropped``."""
_OUT_LIMIT = 64 * 1024
_ACCEPTS_PER_ROUND = 64
"""Connections accepted per wake-up: a flood of connections cannot keep the thread from the
ranks' requests."""
_ONE_CONNECTION_FAILED = frozenset(
    getattr(errno, name)
    for name in (
        "ECONNABORTED",
        "ECONNRESET",
        "EPROTO",
        "EPERM",
        "ETIMEDOUT",
        "ENETDOWN",
        "ENETUNREACH",
        "EHOSTDOWN",
        "EHOSTUNREACH",
        "ENONET",
        "ENOPROTOOPT",
        "EOPNOTSUPP",
    )
    if hasattr(errno, name)
)
"""``accept`` errors that end one incoming connection (Linux reports its network errors
there; accept(2)): the next connection is accepted at once. Any other error (out of
descriptors or memory) pauses accepting until the next scan."""
MAX_COLLECTIVE_NAME = 256
"""The longest collective name a ``waiting`` report may carry."""
_WAKE = object()


class _Refused(Exception):
    """A request the server refuses.

    ``reason``: the ``REJECTED`` key to count it under, or None (not a bad frame). The
    connection is closed after the reply if there is a reason or ``close`` is set.
    """

    def __init__(self, message: str, reason: str | None = None, close: bool = False) -> None:
        super().__init__(message)
        self.reason = reason
        self.close = close or reason is not None


class _Connection:
    """The server's state for one accepted socket."""

    def __init__(self, sock: socket.socket, token: bytes, now: float) -> None:
        self.sock = sock
        self.channel = Channel(token, "server", limit=MAX_HELLO_FRAME)
        self.out = bytearray(self.channel.greeting())
        self.rank: int | None = None
        self.accepted = now
        self.active = now
        self.partial_since: float | None = None
        self.blocked_since: float | None = None
        self.closing = False
        self.events = selectors.EVENT_READ


class GroupGeneratorServer:
    """Serves a GroupGenerator to every rank (rank 0 included) from one daemon thread.

    ``handshake_timeout``: seconds a connection has to greet and say hello, and a frame has to
    arrive (or a reply to leave) once begun. ``idle_timeout``: seconds a rank's connection may
    stay silent between requests (None: as long as the job runs; dead hosts are found by TCP
    keepalive). ``max_pending``: connections without hello kept at once, the oldest cut to
    admit a new one (default: the job's size plus 64, so that every rank can connect at once).
    ``rejected`` and ``dropped`` count, per reason, the frames refused and the connections cut
    by these limits; ``generator_errors`` the exceptions the generator raised.
    """

    def __init__(
        self,
        generator: GroupGenerator,
        token: bytes,
        fingerprint: str,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        handshake_timeout: float = 5.0,
        idle_timeout: float | None = None,
        max_pending: int | None = None,
    ) -> None:
        if not handshake_timeout > 0 or (idle_timeout is not None and not idle_timeout > 0):
            raise ValueError("handshake_timeout and idle_timeout must be positive seconds")
        if max_pending is None:
            max_pending = generator.size + 64
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, got {max_pending}")
        self.generator = generator
        self.token = token
        self.fingerprint = fingerprint
        self.handshake_timeout = handshake_timeout
        self.idle_timeout = idle_timeout
        self.max_pending = max_pending
        self.rejected: collections.Counter[str] = collections.Counter(dict.fromkeys(REJECTED, 0))
        self.dropped: collections.Counter[str] = collections.Counter(dict.fromkeys(DROPPED, 0))
        self.generator_errors = 0
        self.lost: set[int] = set()
        """Ranks whose connection ended before they finished: most likely their process or
        host is gone."""
        self._scan_every = min(1.0, handshake_timeout / 10, (idle_timeout or math.inf) / 10)
        self._listener = socket.create_server((host, port))
        self._listener.setblocking(False)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        self._connections: set[_Connection] = set()
        self._pending: dict[_Connection, None] = {}
        self._ranks: dict[int, _Connection] = {}
        self._listening = True
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="prague-gg", daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._listener.getsockname()[:2]
        return host, port

    @property
    def connections(self) -> int:
        """Connections open now, with or without hello."""
        return len(self._connections)

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join(timeout=5)
        self._wake_w.close()

    def __enter__(self) -> GroupGeneratorServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        next_scan = time.monotonic() + self._scan_every
        try:
            while not self._closed.is_set():
                events = self._selector.select(max(0.0, next_scan - time.monotonic()))
                for key, mask in events:
                    if key.data is None:
                        self._accept()
                    elif key.data is _WAKE:
                        self._drain_wake()
                    else:
                        self._service(key.data, mask)
                now = time.monotonic()
                if now >= next_scan:
                    self._expire(now)
                    next_scan = now + self._scan_every
        finally:
            for conn in list(self._connections):
                self._drop(conn)
            self._selector.close()
            close_quietly(self._listener)
            self._wake_r.close()

    def _drain_wake(self) -> None:
        try:
            self._wake_r.recv(64)
        except OSError:
            pass

    def _accept(self) -> None:
        for _ in range(_ACCEPTS_PER_ROUND):
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in _ONE_CONNECTION_FAILED:
                    continue  # only that connection is lost
                # Out of descriptors or similar: stop accepting until the next scan.
                log.warning("Prague Group Generator: accept failed: %s", e)
                self._pause_listening()
                return
            self._admit(sock)

    def _pause_listening(self) -> None:
        if self._listening:
            self._selector.unregister(self._listener)
            self._listening = False

    def _admit(self, sock: socket.socket) -> None:
        """Start serving one accepted socket with the greeting; any error on it (the peer may
        already have reset it) closes this connection alone."""
        conn: _Connection | None = None
        try:
            sock.setblocking(False)
            _tune(sock)
            if len(self._pending) >= self.max_pending:
                self.dropped["evicted"] += 1
                self._drop(next(iter(self._pending)))
            conn = _Connection(sock, self.token, time.monotonic())
            self._connections.add(conn)
            self._pending[conn] = None
            self._selector.register(sock, conn.events, conn)
            self._flush(conn)
        except Exception as e:
            if not isinstance(e, OSError):
                log.exception("Prague Group Generator: unexpected error on a new connection")
            if conn is None:
                close_quietly(sock)
            else:
                self._drop(conn)

    def _service(self, conn: _Connection, mask: int) -> None:
        if conn not in self._connections:
            return  # dropped earlier in this round
        try:
            if mask & selectors.EVENT_WRITE:
                self._flush(conn)
            if conn not in self._connections or conn.closing or not mask & selectors.EVENT_READ:
                return
            data = conn.sock.recv(MAX_FRAME if conn.rank is not None else MAX_HELLO_FRAME)
            if not data:
                if conn.channel.buffered:
                    self.rejected["truncated"] += 1
                self._drop(conn)
                return
            conn.active = time.monotonic()
            self._process(conn, data)
            self._flush(conn)
        except OSError:
            self._drop(conn)
        except Exception:
            log.exception("Prague Group Generator: unexpected error on a connection")
            self._drop(conn)

    def _process(self, conn: _Connection, data: bytes = b"") -> None:
        """Take in ``data``; answer the complete frames, while the replies waiting stay small."""
        try:
            conn.channel.feed(data)
        except ProtocolError as e:
            self._reject(conn, e.reason, str(e), answer=False)
            return
        while not conn.closing and len(conn.out) < _OUT_LIMIT:
            try:
                message = conn.channel.receive()
            except ProtocolError as e:
                self._reject(conn, e.reason, str(e), answer=conn.rank is not None)
                return
            if message is None:
                break
            conn.out += conn.channel.seal(self._reply(conn, message))
        conn.partial_since = (conn.partial_since or conn.active) if conn.channel.buffered else None

    def _reply(self, conn: _Connection, message: dict[str, Any]) -> dict[str, Any]:
        request_id = message.get("id")
        if not isinstance(request_id, int) or isinstance(request_id, bool):
            request_id = None
        reply: dict[str, Any] = {"id": request_id, "ok": True}
        try:
            if request_id is None:
                raise _Refused(f"'id' must be an integer, got {message.get('id')!r}", "malformed")
            reply.update(self._dispatch(conn, message))
        except _Refused as e:
            reply.update(ok=False, error=str(e))
            if e.reason is not None:
                self.rejected[e.reason] += 1
            if e.close:
                reply["closing"] = True
                conn.closing = True
        except ValueError as e:
            reply.update(ok=False, error=str(e))
        except Exception as e:
            self.generator_errors += 1
            log.exception("Prague Group Generator: %r failed", message.get("op"))
            reply.update(ok=False, error=f"the Group Generator failed: {type(e).__name__}: {e}")
        return reply

    def _dispatch(self, conn: _Connection, message: dict[str, Any]) -> dict[str, Any]:
        op, rank = message.get("op"), message.get("rank", conn.rank)
        if conn.rank is None:
            if op != "hello":
                raise _Refused("the first request must be 'hello'", "before_hello")
            return self._hello(conn, message)
        if op == "hello":
            raise _Refused(f"this connection already said hello as rank {conn.rank}", "malformed")
        if rank != conn.rank:
            raise _Refused(
                f"this connection is rank {conn.rank}'s; it cannot speak for {rank!r}",
                "rank_mismatch",
            )
        if op not in OPS:
            raise _Refused(f"unknown operation {op!r}; known: {', '.join(OPS)}")
        gg = self.generator
        if op == "next":
            group = gg.next_group(conn.rank)
            if isinstance(group, WorldGroup):
                return {"group": list(group), "world": True}
            return {"group": list(group)}
        if op == "sync":
            sync_id = message.get("sync")
            if not isinstance(sync_id, int) or isinstance(sync_id, bool) or sync_id < 1:
                raise _Refused(f"'sync' must be a positive integer, got {sync_id!r}")
            owed = gg.sync(conn.rank, sync_id)
            return owed_message(owed)
        if op == "settle":
            members = message.get("members")
            if not isinstance(members, list) or len(members) > gg.size:
                raise _Refused(f"'members' must be a list of ranks, got {members!r:.80}")
            return owed_message(gg.settle(conn.rank, tuple(members)))
        if op == "finish":
            return owed_message(gg.finish(conn.rank))
        if op == "rejoin":
            return {"syncs": gg.rejoin(conn.rank)}
        if op == "waiting":
            group = message.get("group")
            if not isinstance(group, list) or not all(
                isinstance(r, int) and not isinstance(r, bool) for r in group
            ):
                raise _Refused(f"'group' must be a list of ranks, got {group!r}")
            collective = message.get("collective")
            if collective is not None and not (
                isinstance(collective, str) and 0 < len(collective) <= MAX_COLLECTIVE_NAME
            ):
                raise _Refused(
                    f"'collective' must be a name of 1 to {MAX_COLLECTIVE_NAME} characters, "
                    f"got {collective!r:.80}"
                )
            gg.note_waiting(conn.rank, tuple(group), collective)
            return {}
        return {
            "counts": list(gg.counts),
            "generations": gg.generations,
            "silence": gg.silence(),
            "waits": [None if w is None else list(w) for w in gg.waits()],
            "held": gg.held_ranks(),
            "collectives": gg.waiting_in(),
            "lost": sorted(self.lost),
            "rejected": dict(self.rejected),
            "dropped": dict(self.dropped),
            "generator_errors": self.generator_errors,
            "connections": len(self._connections),
        }

    def _hello(self, conn: _Connection, message: dict[str, Any]) -> dict[str, Any]:
        rank, size = message.get("rank"), self.generator.size
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < size:
            raise _Refused(f"rank {rank!r} is not in 0..{size - 1}", "malformed")
        if message.get("fingerprint") != self.fingerprint:
            raise _Refused(
                f"rank {rank} has Prague options {message.get('fingerprint')!r} but rank 0 "
                f"has {self.fingerprint!r}: every rank must use the same options",
                close=True,
            )
        if rank in self._ranks:
            raise _Refused(f"rank {rank} is already connected", "rank_taken")
        conn.rank = rank
        conn.channel.limit = MAX_FRAME
        self._ranks[rank] = conn
        del self._pending[conn]
        return {"size": size}

    def _reject(self, conn: _Connection, reason: str, error: str, answer: bool) -> None:
        """Count a rejected frame; answer (authenticated peers only) and close."""
        self.rejected[reason] += 1
        conn.closing = True
        if answer and conn.channel.ready:
            conn.out += conn.channel.seal(
                {"id": None, "ok": False, "error": error, "closing": True}
            )

    def _flush(self, conn: _Connection) -> None:
        if conn.out:
            try:
                sent = conn.sock.send(conn.out)
            except (BlockingIOError, InterruptedError):
                sent = 0
            del conn.out[:sent]
        if conn.closing and (not conn.out or not conn.channel.ready):
            self._drop(conn)
            return
        if conn.out:
            conn.blocked_since = conn.blocked_since or time.monotonic()
            self._watch(conn, selectors.EVENT_WRITE)
            return
        conn.blocked_since = None
        if conn.events != selectors.EVENT_READ:
            self._watch(conn, selectors.EVENT_READ)
            # Frames left unanswered while the replies were waiting.
            self._process(conn)
            if conn.out or conn.closing:
                self._flush(conn)

    def _watch(self, conn: _Connection, events: int) -> None:
        if conn.events != events:
            conn.events = events
            self._selector.modify(conn.sock, events, conn)

    def _expire(self, now: float) -> None:
        if not self._listening:
            self._selector.register(self._listener, selectors.EVENT_READ, None)
            self._listening = True
        for conn in list(self._connections):
            begun = conn.partial_since or conn.blocked_since
            if conn.rank is None:
                late = now - conn.accepted > self.handshake_timeout and "handshake_timeout"
            elif begun is not None and now - begun > self.handshake_timeout:
                late = "stalled"
            else:
                idle = self.idle_timeout is not None and now - conn.active > self.idle_timeout
                late = idle and "idle_timeout"
            if late:
                self.dropped[late] += 1
                self._drop(conn)

    def _drop(self, conn: _Connection) -> None:
        if conn not in self._connections:
            return
        self._connections.discard(conn)
        self._pending.pop(conn, None)
        if conn.rank is not None and self._ranks.get(conn.rank) is conn:
            del self._ranks[conn.rank]
            if conn.rank in self.generator.active:
                self.lost.add(conn.rank)
        try:
            self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        close_quietly(conn.sock)


def _tune(sock: socket.socket) -> None:
    """No Nagle delay; TCP keepalive finds a vanished peer within about two minutes."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 6)):
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
