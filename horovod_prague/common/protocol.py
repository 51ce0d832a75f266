"""The wire protocol between ranks and the Group Generator (version 4).

Each side opens with a greeting: ``PRGG``, the version byte, then a fresh 16-byte random
nonce. Then frames: a 4-byte big-endian length, then that many bytes: the frame's 8-byte
big-endian sequence number, a 32-byte HMAC-SHA256 under the job's token, and the body, a UTF-8
JSON object. The MAC covers the protocol version, both nonces (the server's first), the
direction and the sequence number as well as the body, so a frame is accepted only on the
connection, in the direction and at the position it was made for: frames are numbered 0, 1,
2, ... in each direction, and a replayed, reordered, reflected or transplanted frame fails.
docs/design.md lists the operations and the limits.

    >>> token = new_token()
    >>> client, server = Channel(token, "client"), Channel(token, "server")
    >>> server.feed(client.greeting())
    >>> client.feed(server.greeting())
    >>> server.feed(client.seal({"op": "next", "id": 1}))
    >>> server.receive()
    {'op': 'next', 'id': 1}
"""

from __future__ import annotations

import hmac
import json
import secrets
import socket
import struct
from collections.abc import Callable
from typing import Any

from .group_generator import Owed, WorldGroup

VERSION = 4
MAGIC = b"PRGG"
NONCE_SIZE = 16
GREETING_SIZE = len(MAGIC) + 1 + NONCE_SIZE
MAX_FRAME = 64 * 1024
"""The largest frame length (sequence number, MAC and body) accepted once a rank has said hello."""
MAX_HELLO_FRAME = 4 * 1024
"""The largest frame length accepted before hello."""
MAX_REPLY = 4 * 1024 * 1024
"""The largest frame length a client accepts: ``stats`` and ``sync`` replies grow with the job."""
OPS = ("hello", "next", "sync", "settle", "finish", "rejoin", "waiting", "stats")
_LENGTH = struct.Struct(">I")
_SEQ = struct.Struct(">Q")
_MAC_SIZE = 32
MIN_FRAME = _SEQ.size + _MAC_SIZE
_DOMAIN = b"prague-gg"
_TO_SERVER, _TO_CLIENT = b"C", b"S"
_ENCODER = json.JSONEncoder(separators=(",", ":"))


class ProtocolError(RuntimeError):
    """A malformed, unauthenticated or unexpected message; ``reason`` is a short counter key."""

    def __init__(self, message: str, reason: str = "malformed") -> None:
        super().__init__(message)
        self.reason = reason


class GroupGeneratorTimeout(TimeoutError):
    """The Group Generator did not answer in time."""


def new_token() -> bytes:
    """A fresh random per-job secret."""
    return secrets.token_bytes(32)


class Channel:
    """One end of one connection: the peer's greeting, then frames checked in order.

    Pure bookkeeping, no socket: ``feed`` it the bytes received, ``receive`` the messages out
    of them, ``seal`` the messages to send. ``limit`` is the largest frame length accepted;
    after a ProtocolError the channel refuses everything.
    """

    def __init__(
        self, token: bytes, side: str, limit: int = MAX_FRAME, nonce: bytes | None = None
    ) -> None:
        if side not in ("client", "server"):
            raise ValueError(f"side must be 'client' or 'server', got {side!r}")
        self.token = token
        self.side = side
        self.limit = limit
        self.nonce = secrets.token_bytes(NONCE_SIZE) if nonce is None else nonce
        if len(self.nonce) != NONCE_SIZE:
            raise ValueError(f"a nonce has {NONCE_SIZE} bytes, got {len(self.nonce)}")
        self.sent = 0
        self.received = 0
        self._buffer = bytearray()
        self._failed: ProtocolError | None = None
        # HMAC states already keyed and fed the connection's prefix (set by the greeting):
        # each frame's MAC is a copy of one, given the sequence number and body.
        self._send_mac: hmac.HMAC | None = None
        self._receive_mac: hmac.HMAC | None = None

    @property
    def ready(self) -> bool:
        """Whether the peer's greeting has arrived (frames can be sealed)."""
        return self._receive_mac is not None

    @property
    def buffered(self) -> int:
        """Bytes received and not yet consumed: a partial greeting or frame."""
        return len(self._buffer)

    def greeting(self) -> bytes:
        """The bytes this side opens the connection with."""
        return MAGIC + bytes([VERSION]) + self.nonce

    def feed(self, data: bytes) -> None:
        """Add bytes received; the peer's greeting is checked as soon as it is complete."""
        if self._failed is not None:
            raise self._failed
        self._buffer += data
        if not self.ready:
            self._guarded(self._greeting)

    def receive(self) -> dict[str, Any] | None:
        """The next message, or None until the bytes fed hold a complete frame."""
        return self._guarded(self._receive)

    def _guarded(self, step: Callable[[], Any]) -> Any:
        if self._failed is not None:
            raise self._failed
        try:
            return step()
        except ProtocolError as e:
            self._failed = e
            self._buffer.clear()
            raise

    def seal(self, message: dict[str, Any]) -> bytes:
        """``message`` as the next frame to send, length included."""
        if not self.ready:
            raise ProtocolError("cannot send before the peer's greeting", "state")
        body = _ENCODER.encode(message).encode()
        seq = _SEQ.pack(self.sent)
        mac = self._send_mac.copy()
        mac.update(seq)
        mac.update(body)
        self.sent += 1
        return b"".join((_LENGTH.pack(MIN_FRAME + len(body)), seq, mac.digest(), body))

    def _greeting(self) -> None:
        buf = self._buffer
        if buf[: len(MAGIC)] != MAGIC[: len(buf)]:
            raise ProtocolError("not a Prague Group Generator greeting", "malformed")
        if len(buf) < GREETING_SIZE:
            return
        if buf[len(MAGIC)] != VERSION:
            raise ProtocolError(
                f"protocol version mismatch: the peer speaks {buf[len(MAGIC)]}, this side "
                f"speaks {VERSION}",
                "version",
            )
        self._start(bytes(buf[len(MAGIC) + 1 : GREETING_SIZE]))
        del buf[:GREETING_SIZE]

    def _receive(self) -> dict[str, Any] | None:
        buf = self._buffer
        if not self.ready:
            return None
        if len(buf) < _LENGTH.size:
            return None
        (length,) = _LENGTH.unpack_from(buf)
        if length > self.limit:
            raise ProtocolError(
                f"frame of {length} bytes exceeds the limit {self.limit}", "oversized"
            )
        if length < MIN_FRAME:
            raise ProtocolError(f"frame of {length} bytes is shorter than its header", "malformed")
        end = _LENGTH.size + length
        if len(buf) < end:
            return None
        with memoryview(buf) as view:
            frame = bytes(view[_LENGTH.size : end])
        del buf[:end]
        return self._open(frame)

    def _start(self, peer_nonce: bytes) -> None:
        if self.side == "server":
            server, client, send, receive = self.nonce, peer_nonce, _TO_CLIENT, _TO_SERVER
        else:
            server, client, send, receive = peer_nonce, self.nonce, _TO_SERVER, _TO_CLIENT
        common = _DOMAIN + bytes([VERSION]) + server + client
        self._send_mac = hmac.new(self.token, common + send, "sha256")
        self._receive_mac = hmac.new(self.token, common + receive, "sha256")

    def _open(self, frame: bytes) -> dict[str, Any]:
        seq_bytes, body = frame[: _SEQ.size], frame[MIN_FRAME:]
        expected = self._receive_mac.copy()
        expected.update(seq_bytes)
        expected.update(body)
        if not hmac.compare_digest(frame[_SEQ.size : MIN_FRAME], expected.digest()):
            raise ProtocolError(
                "frame failed authentication (wrong job token, or made for another connection "
                "or direction)",
                "bad_mac",
            )
        (seq,) = _SEQ.unpack(seq_bytes)
        if seq != self.received:
            raise ProtocolError(
                f"frame {seq} arrived where frame {self.received} was due (replayed or reordered)",
                "out_of_sequence",
            )
        self.received += 1
        try:
            message = json.loads(body.decode("utf-8"))
        except (ValueError, RecursionError):
            raise ProtocolError("frame body is not valid UTF-8 JSON", "malformed") from None
        if not isinstance(message, dict):
            raise ProtocolError("frame body is not a JSON object", "malformed")
        return message


def greet(sock: socket.socket, channel: Channel) -> None:
    """Exchange greetings over a blocking ``sock``."""
    sock.sendall(channel.greeting())
    while not channel.ready:
        data = sock.recv(GREETING_SIZE)
        if not data:
            raise ProtocolError("connection closed before the greeting", "truncated")
        channel.feed(data)


def receive(sock: socket.socket, channel: Channel) -> dict[str, Any] | None:
    """The next message from a blocking ``sock``, or None when the peer closed it cleanly."""
    while True:
        message = channel.receive()
        if message is not None:
            return message
        data = sock.recv(MAX_FRAME)
        if not data:
            if channel.buffered:
                raise ProtocolError(
                    f"connection closed in the middle of a message ({channel.buffered} bytes)",
                    "truncated",
                )
            return None
        channel.feed(data)


def close_quietly(sock: socket.socket) -> None:
    """Shut down and close ``sock``, ignoring that it is already closed or broken."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def owed_message(owed: Owed) -> dict[str, Any]:
    """The reply that tells a rank what it owes (``sync``, ``settle``, ``finish``): its
    ``groups``, in order; ``world``, the positions of the periodic world groups among them,
    which their members run as a consensus (``WorldGroup``), as ``next`` says for one; and
    ``syncs``, the world averages after them."""
    return {
        "groups": [list(g) for g in owed.groups],
        "world": [i for i, g in enumerate(owed.groups) if isinstance(g, WorldGroup)],
        "syncs": owed.world_averages,
    }


def owed_of(reply: dict[str, Any]) -> Owed:
    """What ``owed_message`` encoded."""
    world = set(reply.get("world", ()))
    groups = [WorldGroup(g) if i in world else tuple(g) for i, g in enumerate(reply["groups"])]
    return Owed(groups, reply["syncs"])
