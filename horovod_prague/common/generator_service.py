"""The Group Generator service: one server thread on rank 0 and the client every rank uses.

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
import itertools
import logging
import math
import selectors
import socket
import threading
import time
from typing import Any

from .group_generator import GroupGenerator, Owed, WorldGroup
from .protocol import (
    MAX_FRAME,
    MAX_HELLO_FRAME,
    MAX_REPLY,
    OPS,
    Channel,
    GroupGeneratorTimeout,
    ProtocolError,
    greet,
    receive,
)
from .strategies import Group

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
            _quiet_close(self._listener)
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
                _quiet_close(sock)
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
            return _owed_reply(owed)
        if op == "settle":
            members = message.get("members")
            if not isinstance(members, list) or len(members) > gg.size:
                raise _Refused(f"'members' must be a list of ranks, got {members!r:.80}")
            return _owed_reply(gg.settle(conn.rank, tuple(members)))
        if op == "finish":
            return _owed_reply(gg.finish(conn.rank))
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
        _quiet_close(conn.sock)


class GroupGeneratorClient:
    """One rank's connection to the Group Generator; every request has ``timeout`` seconds.

    A request whose reply carries nothing the rank acts on (``DISPOSABLE``: ``waiting``,
    ``stats``) may time out and leave the connection open: its late reply, known by the id it
    echoes, is read and dropped before the next reply. After a timeout of any other request
    (its reply decides what the rank must do next: skipping it would leave the rank out of
    step with the Group Generator), or any protocol or connection error, the connection is
    closed for good; later requests raise ConnectionError naming the first error.
    """

    DISPOSABLE = frozenset({"waiting", "stats"})

    def __init__(self, host: str, port: int, token: bytes, rank: int, timeout: float) -> None:
        self.where = f"{host}:{port}"
        self.token = token
        self.rank = rank
        self._timeout = timeout
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._broken: str | None = None
        self._abandoned: collections.deque[tuple[int, str]] = collections.deque()
        self._channel = Channel(token, "client", limit=MAX_REPLY)
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise ConnectionError(
                f"rank {rank} could not reach the Prague Group Generator on rank 0 at "
                f"{self.where} within {timeout:g}s: {e}. Check that rank 0 is running and "
                "that HOROVOD_PRAGUE_COORDINATOR_ADDR names an address this host can reach."
            ) from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            greet(self._sock, self._channel)
        except TimeoutError:
            self.close()
            raise GroupGeneratorTimeout(
                f"rank {rank}: the Prague Group Generator at {self.where} did not greet within "
                f"{timeout:g}s (HOROVOD_PRAGUE_TIMEOUT)"
            ) from None
        except (OSError, ProtocolError) as e:
            self.close()
            raise ConnectionError(
                f"rank {rank}: the Prague Group Generator at {self.where} failed the greeting: {e}"
            ) from None

    @property
    def timeout(self) -> float:
        """Seconds each request waits for its reply (and the greeting waited)."""
        return self._timeout

    @timeout.setter
    def timeout(self, seconds: float) -> None:
        self._timeout = seconds
        self._sock.settimeout(seconds)

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        with self._lock:
            if self._broken is not None:
                raise ConnectionError(
                    f"rank {self.rank}: the connection to the Prague Group Generator at "
                    f"{self.where} was lost after an earlier error ({self._broken}); "
                    "it is not reopened"
                )
            request_id = next(self._ids)
            sent = False
            try:
                self._sock.sendall(self._channel.seal({"op": op, "id": request_id, **fields}))
                sent = True
                reply = self._reply_after_late_ones(op)
            except TimeoutError:
                if sent and op in self.DISPOSABLE:
                    self._abandoned.append((request_id, op))
                else:
                    self._break(f"{op!r} timed out after {self.timeout:g}s")
                raise GroupGeneratorTimeout(
                    f"rank {self.rank}: the Prague Group Generator at {self.where} did not "
                    f"answer {op!r} within {self.timeout:g}s (HOROVOD_PRAGUE_TIMEOUT)"
                ) from None
            except OSError as e:
                self._break(f"{op!r} failed: {e}")
                raise ConnectionError(
                    f"rank {self.rank}: lost the connection to the Prague Group Generator at "
                    f"{self.where} during {op!r}: {e}"
                ) from None
            except ProtocolError as e:
                self._break(f"{op!r} got a bad reply: {e}")
                raise
            if reply is None:
                self._break(f"the server closed the connection during {op!r}")
                raise ConnectionError(
                    f"rank {self.rank}: the Prague Group Generator at {self.where} closed the "
                    f"connection during {op!r} (wrong job token, or has rank 0 exited?)"
                )
            if reply.get("closing"):
                self._break(f"the server refused {op!r}: {reply.get('error')}")
            if not reply.get("ok"):
                raise RuntimeError(
                    f"rank {self.rank}: the Prague Group Generator refused {op!r}: "
                    f"{reply.get('error')}"
                )
            if reply.get("id") != request_id:
                self._break(f"reply id {reply.get('id')!r} to request {request_id}")
                raise ProtocolError(
                    f"reply id {reply.get('id')!r} does not match request id {request_id}"
                )
        return reply

    def _reply_after_late_ones(self, op: str) -> dict[str, Any] | None:
        """The next reply that is not the late reply of a request given up on.

        Replies come in the order of the requests, so a late one is always the oldest
        request given up on; one the server closed the connection after ends the connection.
        """
        while True:
            reply = receive(self._sock, self._channel)
            if reply is None or not self._abandoned or reply.get("id") != self._abandoned[0][0]:
                return reply
            _, late_op = self._abandoned.popleft()
            if reply.get("closing"):
                self._break(f"the server refused {late_op!r}: {reply.get('error')}")
                raise ConnectionError(
                    f"rank {self.rank}: the Prague Group Generator at {self.where} closed the "
                    f"connection after refusing an earlier {late_op!r}, before {op!r}: "
                    f"{reply.get('error')}"
                )

    def hello(self, fingerprint: str) -> int:
        """Bind this connection to ``rank``; the job's size."""
        return self.request("hello", rank=self.rank, fingerprint=fingerprint)["size"]

    def next_group(self) -> Group:
        """The next group; a ``WorldGroup`` where it is the periodic global average."""
        reply = self.request("next")
        return WorldGroup(reply["group"]) if reply.get("world") else tuple(reply["group"])

    def sync(self, sync_id: int) -> Owed:
        return _owed(self.request("sync", sync=sync_id))

    def settle(self, members: Group) -> Owed:
        return _owed(self.request("settle", members=list(members)))

    def finish(self) -> Owed:
        return _owed(self.request("finish"))

    def rejoin(self) -> int:
        """Become active again after finishing; the id of the last sync (see
        ``GroupGenerator.rejoin``)."""
        return int(self.request("rejoin")["syncs"])

    def waiting(self, group: Group, collective: str | None = None) -> None:
        """Tell the Group Generator this rank has waited long on ``group``'s average, or in
        the script's ``collective`` over the ranks ``group``."""
        if collective is None:
            self.request("waiting", group=list(group))
        else:
            self.request("waiting", group=list(group), collective=collective)

    def stats(self) -> dict[str, Any]:
        return self.request("stats")

    def close(self) -> None:
        _quiet_close(self._sock)

    def _break(self, reason: str) -> None:
        self._broken = reason
        self.close()

    def __enter__(self) -> GroupGeneratorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _tune(sock: socket.socket) -> None:
    """No Nagle delay; TCP keepalive finds a vanished peer within about two minutes."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 60), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 6)):
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def _quiet_close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def _owed_reply(owed: Owed) -> dict[str, Any]:
    """``world``: the positions of the periodic world groups among ``groups``, which their
    members run as a consensus (``WorldGroup``), as ``next`` says for one."""
    return {
        "groups": [list(g) for g in owed.groups],
        "world": [i for i, g in enumerate(owed.groups) if isinstance(g, WorldGroup)],
        "syncs": owed.world_averages,
    }


def _owed(reply: dict[str, Any]) -> Owed:
    world = set(reply.get("world", ()))
    groups = [WorldGroup(g) if i in world else tuple(g) for i, g in enumerate(reply["groups"])]
    return Owed(groups, reply["syncs"])
