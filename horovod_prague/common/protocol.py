"""The wire protocol between ranks and the Group Generator (version 1).

A frame is a 4-byte big-endian length, then that many bytes: a 32-byte HMAC-SHA256 of the body
under the job's token, then the body, a UTF-8 JSON object. Requests carry ``v`` (protocol
version), ``op``, ``rank`` and ``id`` (echoed in the reply); replies carry ``v``, ``id``, ``ok``
and either the result or ``error``. docs/design.md lists the operations.

    >>> token = new_token()
    >>> frame = encode({"v": 1, "op": "next", "rank": 0, "id": 1}, token)
    >>> decode(frame[4:], token)["op"]
    'next'
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import socket
import struct
from typing import Any

VERSION = 1
MAX_FRAME = 1 << 20
OPS = ("hello", "next", "sync", "finish", "stats")
_HEADER = struct.Struct(">I")
_MAC_SIZE = 32


class ProtocolError(RuntimeError):
    """A malformed, unauthenticated or unexpected message."""


class CoordinatorTimeout(TimeoutError):
    """The Group Generator did not answer in time."""


def new_token() -> bytes:
    """A fresh random per-job secret."""
    return secrets.token_bytes(32)


def encode(message: dict[str, Any], token: bytes) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode()
    mac = hmac.new(token, body, hashlib.sha256).digest()
    return _HEADER.pack(len(mac) + len(body)) + mac + body


def decode(payload: bytes, token: bytes) -> dict[str, Any]:
    """Check the HMAC and parse the body of one frame (without its length header)."""
    if len(payload) < _MAC_SIZE:
        raise ProtocolError(f"malformed message: {len(payload)} bytes is shorter than its MAC")
    mac, body = payload[:_MAC_SIZE], payload[_MAC_SIZE:]
    if not hmac.compare_digest(mac, hmac.new(token, body, hashlib.sha256).digest()):
        raise ProtocolError("message failed authentication: wrong job token")
    try:
        message = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProtocolError(f"malformed message body: {e}") from None
    if not isinstance(message, dict):
        raise ProtocolError("malformed message: the body is not a JSON object")
    if message.get("v") != VERSION:
        raise ProtocolError(
            f"protocol version mismatch: got {message.get('v')!r}, this side speaks {VERSION}"
        )
    return message


def send(sock: socket.socket, message: dict[str, Any], token: bytes) -> None:
    sock.sendall(encode(message, token))


def receive(sock: socket.socket, token: bytes) -> dict[str, Any] | None:
    """One message from ``sock``, or None when the peer closed the connection cleanly."""
    header = _read_exactly(sock, _HEADER.size, allow_eof=True)
    if header is None:
        return None
    (length,) = _HEADER.unpack(header)
    if not _MAC_SIZE <= length <= MAX_FRAME:
        raise ProtocolError(f"malformed message: frame length {length} out of range")
    payload = _read_exactly(sock, length, allow_eof=False)
    assert payload is not None
    return decode(payload, token)


def _read_exactly(sock: socket.socket, n: int, allow_eof: bool) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(n - len(chunks))
        if not chunk:
            if allow_eof and not chunks:
                return None
            raise ProtocolError(f"connection closed in the middle of a message ({len(chunks)}/{n})")
        chunks += chunk
    return bytes(chunks)
