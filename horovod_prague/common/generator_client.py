"""A rank's connection to the Group Generator on rank 0 (``generator_service``'s server).

Every request has the job's timeout; each reply is read on the connection that asked::

    with GroupGeneratorClient(host, port, token, rank=1, timeout=60) as client:
        client.hello(fingerprint)  # the job's size
        client.next_group()  # e.g. (0, 1)
"""

from __future__ import annotations

import collections
import itertools
import socket
import threading
from typing import Any

from .group_generator import Owed, WorldGroup
from .protocol import (
    MAX_REPLY,
    Channel,
    GroupGeneratorTimeout,
    ProtocolError,
    close_quietly,
    greet,
    owed_of,
    receive,
)
from .strategies import Group


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
        return owed_of(self.request("sync", sync=sync_id))

    def settle(self, members: Group) -> Owed:
        return owed_of(self.request("settle", members=list(members)))

    def finish(self) -> Owed:
        return owed_of(self.request("finish"))

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
        close_quietly(self._sock)

    def _break(self, reason: str) -> None:
        self._broken = reason
        self.close()

    def __enter__(self) -> GroupGeneratorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
