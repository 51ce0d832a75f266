"""Load on the Group Generator service: `next` requests per second and their latency.

    PYTHONPATH=. .venv/bin/python benchmarks/gg_load.py      # 64 ranks, smart and random, 10 s
    PYTHONPATH=. .venv/bin/python benchmarks/gg_load.py --duration 4 --ranks 16 --train python

(``PYTHONPATH=.`` measures the checkout, not the copy installed in ``.venv``.)

A server process runs a GroupGeneratorServer while its main thread "trains" (numpy matmuls by
default, standing in for rank 0's training step; ``--train torch`` runs SGD steps of a small
PyTorch MLP on one thread, as rank 0 itself would; ``--train python`` holds the GIL throughout).
This process drives it over loopback with one connection per simulated rank, all from one
``selectors`` loop, in two modes per strategy: *saturated*, every rank sends its next `next`
as soon as the reply arrives; and *paced*, the ranks together send ``--rate`` requests per
second on a fixed schedule (a comma-separated list: one paced phase per rate). Latency is
from a request's send to its reply. ``--duration`` is the whole run, split evenly over the
phases; the first tenth of each phase is not counted.

``--server echo`` replaces the Group Generator with a bare echo server on the same kind of
thread, one ``selectors`` loop and the same training stand-in (no protocol, no MAC, no
strategy), driven the same way: the latency floor of this machine for such a service.
"""

from __future__ import annotations

import argparse
import collections
import math
import multiprocessing
import os
import selectors
import socket
import sys
import threading
import time
from multiprocessing.connection import Connection

from horovod_prague.common.config import PragueConfig
from horovod_prague.common.generator_service import GroupGeneratorServer
from horovod_prague.common.group_generator import GroupGenerator
from horovod_prague.common.protocol import Channel, greet, new_token, receive
from horovod_prague.common.strategies import make_strategy
from horovod_prague.common.topology import Topology

FINGERPRINT = "gg-load"
_LENGTH_SIZE = 4
_SEAL_AHEAD_PER_S = 40_000
"""Requests sealed before a phase, per second of it, over all ranks; more are sealed on demand."""


def serve(
    strategy: str,
    ranks: int,
    local_size: int,
    train: str,
    kind: str,
    pipe: Connection,
    switch_interval_ms: float | None = None,
) -> None:
    """The rank-0 stand-in: the server, and a training loop in the main thread until told."""
    if switch_interval_ms is not None:
        sys.setswitchinterval(switch_interval_ms / 1000)
    step = _training_step(train)
    if kind == "echo":
        server: GroupGeneratorServer | EchoServer = EchoServer()
    else:
        topology = Topology(ranks, local_size)
        gg = GroupGenerator(make_strategy(PragueConfig(strategy=strategy), topology))
        server = GroupGeneratorServer(gg, new_token(), FINGERPRINT)
    with server:
        pipe.send((server.address, server.token))
        thread = next(t for t in threading.enumerate() if t.name == "prague-gg").native_id
        steps, phase_start, cpu_start = 0, time.perf_counter(), _thread_cpu(thread)
        while True:
            if pipe.poll():
                request = pipe.recv()
                now, cpu = time.perf_counter(), _thread_cpu(thread)
                pipe.send((steps / (now - phase_start), cpu - cpu_start))
                if request == "stop":
                    break
                steps, phase_start, cpu_start = 0, now, cpu
            step()
            steps += 1
        stats = {
            "rejected": sum(server.rejected.values()),
            "dropped": sum(server.dropped.values()),
            "generator_errors": server.generator_errors,
        }
    pipe.send(stats)


class EchoServer:
    """Sends back every byte received, from one ``selectors`` thread named as the GG's."""

    token = b""

    def __init__(self) -> None:
        self.rejected: dict[str, int] = {}
        self.dropped: dict[str, int] = {}
        self.generator_errors = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="prague-gg", daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        return self._listener.getsockname()[:2]

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(0.1):
                if key.fileobj is self._listener:
                    sock, _ = self._listener.accept()
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    self._selector.register(sock, selectors.EVENT_READ)
                    continue
                sock = key.fileobj
                data = sock.recv(65536)
                if data:
                    sock.sendall(data)
                else:
                    self._selector.unregister(sock)
                    sock.close()

    def __enter__(self) -> EchoServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()
        self._selector.close()


def _thread_cpu(native_id: int | None) -> float:
    """CPU seconds the thread has used (Linux; nan elsewhere)."""
    try:
        with open(f"/proc/self/task/{native_id}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _training_step(train: str):
    if train == "none":
        return lambda: time.sleep(0.001)
    if train == "python":

        def python_step() -> None:
            total = 0
            for i in range(20_000):
                total += i * i

        return python_step
    if train == "torch":
        return _torch_step()
    import numpy as np

    rng = np.random.default_rng(0)
    weights = rng.standard_normal((256, 256)) / 16
    state = {"x": rng.standard_normal((128, 256))}

    def numpy_step() -> None:
        state["x"] = np.tanh(state["x"] @ weights)

    return numpy_step


def _torch_step():
    """One SGD step of a small MLP on one CPU thread: rank 0's own training, GIL and all."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    inputs, labels = torch.randn(64, 256), torch.randint(0, 10, (64,))

    def torch_step() -> None:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs), labels).backward()
        optimizer.step()

    return torch_step


class Rank:
    """One simulated rank's connection, driven without blocking.

    The driver stands in for ranks on other hosts, so its own work is kept out of the timed
    phases, where it would take CPU from the server on this machine: ``prepare`` seals a
    phase's requests beforehand, and during the phase a reply is only framed (its length
    read) and timed; ``verify`` then checks every reply's MAC, sequence, id and ``ok``.
    """

    def __init__(self, address: tuple[str, int], token: bytes, rank: int, echo: bool) -> None:
        self.sock = socket.create_connection(address, timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.ids = 0
        self.verified = 0
        self.sent_at: float | None = None
        self.due = 0.0
        self.sealed: collections.deque[bytes] = collections.deque()
        self.received = bytearray()
        self.framed = 0
        self.channel: Channel | EchoChannel
        if echo:
            self.channel = EchoChannel()
            self.sock.setblocking(False)
            return
        self.channel = Channel(token, "client")
        greet(self.sock, self.channel)
        self.sock.sendall(
            self.channel.seal({"op": "hello", "id": 0, "rank": rank, "fingerprint": FINGERPRINT})
        )
        reply = receive(self.sock, self.channel)
        if not reply or not reply.get("ok"):
            raise RuntimeError(f"rank {rank}: hello refused: {reply}")
        self.sock.setblocking(False)

    def prepare(self, count: int) -> None:
        """Seal ``count`` more requests ahead of the phase (kept in order: a sealed frame
        holds its sequence number)."""
        first = self.ids + len(self.sealed) + 1
        for request_id in range(first, first + count):
            self.sealed.append(self.channel.seal({"op": "next", "id": request_id}))

    def send(self, now: float) -> None:
        if not self.sealed:
            self.prepare(1)
        self.ids += 1
        self.sock.send(self.sealed.popleft())
        self.sent_at = now

    def replies(self) -> int:
        """How many replies the bytes available complete (0 or 1: one request in flight)."""
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the Group Generator closed a connection")
        self.received += data
        count = 0
        while len(self.received) >= self.framed + _LENGTH_SIZE:
            length = int.from_bytes(self.received[self.framed : self.framed + _LENGTH_SIZE], "big")
            if len(self.received) < self.framed + _LENGTH_SIZE + length:
                break
            self.framed += _LENGTH_SIZE + length
            count += 1
        return count

    def verify(self) -> None:
        """Check every reply received so far; raises on the first bad one."""
        self.channel.feed(bytes(self.received[: self.framed]))
        del self.received[: self.framed]
        self.framed = 0
        while (reply := self.channel.receive()) is not None:
            self.verified += 1
            if not reply.get("ok") or reply.get("id") != self.verified:
                raise RuntimeError(f"bad reply: {reply}")
        if self.verified != self.ids:
            raise RuntimeError(f"{self.ids} requests sent, {self.verified} replies verified")


class EchoChannel:
    """Frames for the echo server: a length prefix and a request's id in 8 bytes, which come
    back as its reply."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def seal(self, message: dict) -> bytes:
        return (8).to_bytes(_LENGTH_SIZE, "big") + message["id"].to_bytes(8, "big")

    def feed(self, data: bytes) -> None:
        self.buffer += data

    def receive(self) -> dict | None:
        if len(self.buffer) < _LENGTH_SIZE + 8:
            return None
        request_id = int.from_bytes(self.buffer[_LENGTH_SIZE : _LENGTH_SIZE + 8], "big")
        del self.buffer[: _LENGTH_SIZE + 8]
        return {"ok": True, "id": request_id}


def drive(ranks: list[Rank], seconds: float, rate: float | None) -> tuple[int, list[float], float]:
    """(requests counted, their latencies in s, seconds counted); ``rate`` None: saturated."""
    selector = selectors.DefaultSelector()
    for r in ranks:
        selector.register(r.sock, selectors.EVENT_READ, r)
    start = time.perf_counter()
    counted_from, end = start + seconds / 10, start + seconds
    interval = len(ranks) / rate if rate else 0.0
    for i, r in enumerate(ranks):
        r.due = start + interval * i / len(ranks)
    latencies: list[float] = []
    waiting = list(ranks) if rate else []
    if not rate:
        for r in ranks:
            r.send(start)
    now = start
    while now < end:
        timeout = 0.01
        if waiting:
            timeout = max(0.0, min(r.due for r in waiting) - now)
        for key, _ in selector.select(timeout):
            r = key.data
            if r.replies():
                now = time.perf_counter()
                if r.sent_at >= counted_from:
                    latencies.append(now - r.sent_at)
                if rate:
                    r.due += interval
                    r.sent_at = None
                    waiting.append(r)
                else:
                    r.send(now)
        now = time.perf_counter()
        if waiting:
            ready = [r for r in waiting if r.due <= now]
            for r in ready:
                waiting.remove(r)
                r.send(now)
    # Let the requests in flight finish, so the next phase starts clean.
    for r in ranks:
        if r.sent_at is not None:
            r.sock.setblocking(True)
            while not r.replies():
                pass
            r.sock.setblocking(False)
            r.sent_at = None
    selector.close()
    return len(latencies), latencies, end - counted_from


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--local-size", type=int, default=8)
    parser.add_argument("--strategies", default="smart,random")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds, all phases")
    parser.add_argument(
        "--rate", default="10000", help="paced mode, requests/s; a comma-separated list"
    )
    parser.add_argument("--train", default="numpy", choices=("numpy", "torch", "python", "none"))
    parser.add_argument("--server", default="gg", choices=("gg", "echo"))
    parser.add_argument(
        "--switch-interval",
        type=float,
        default=None,
        help="ms: the server process's sys.setswitchinterval (default: CPython's, 5 ms)",
    )
    args = parser.parse_args()
    echo = args.server == "echo"
    strategies = ["echo"] if echo else args.strategies.split(",")
    try:
        rates = [float(r) for r in args.rate.split(",")]
    except ValueError:
        parser.error(f"--rate: comma-separated requests/s, got {args.rate!r}")
    if not all(r > 0 for r in rates):
        parser.error(f"--rate: every rate must be positive, got {args.rate!r}")
    phase = args.duration / ((1 + len(rates)) * len(strategies))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ctx = multiprocessing.get_context("spawn")
    print(
        f"{args.ranks} ranks ({args.local_size} per node), rank 0 training: {args.train}, "
        f"{phase:.2f} s per phase, {os.cpu_count()} cores"
    )
    print(
        "| strategy | mode | offered req/s | req/s | p50 ms | p99 ms | max ms "
        "| server CPU us/req | driver CPU us/req | train steps/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for strategy in strategies:
        here, there = ctx.Pipe()
        server = ctx.Process(
            daemon=True,
            target=serve,
            args=(
                strategy,
                args.ranks,
                args.local_size,
                args.train,
                args.server,
                there,
                args.switch_interval,
            ),
        )
        server.start()
        address, token = here.recv()
        ranks = [Rank(address, token, r, echo) for r in range(args.ranks)]
        for mode, rate in (("saturated", None), *(("paced", r) for r in rates)):
            for r in ranks:
                r.prepare(math.ceil(phase * (rate or _SEAL_AHEAD_PER_S) * 1.1 / len(ranks)))
            here.send("phase")
            here.recv()
            driver_cpu = time.process_time()
            count, latencies, counted = drive(ranks, phase, rate)
            driver_cpu = time.process_time() - driver_cpu
            here.send("phase")
            train_rate, server_cpu = here.recv()
            for r in ranks:
                r.verify()
            served = count * phase / counted  # requests in the whole phase, warm-up included
            latencies.sort()
            ms = [1e3 * percentile(latencies, q) for q in (0.5, 0.99)]
            slowest = 1e3 * max(latencies, default=float("nan"))  # none: the server starved
            server_us, driver_us = (
                1e6 * cpu / served if served else float("nan") for cpu in (server_cpu, driver_cpu)
            )
            print(
                f"| {strategy} | {mode} | {'-' if rate is None else f'{rate:,.0f}'} | "
                f"{count / counted:,.0f} | {ms[0]:.3f} | {ms[1]:.3f} | "
                f"{slowest:.3f} | {server_us:.1f} | {driver_us:.1f} | {train_rate:,.0f} |",
                flush=True,
            )
        for r in ranks:
            r.sock.close()
        here.send("stop")
        here.recv()
        stats = here.recv()
        server.join(10)
        if any(stats.values()):
            print(f"{strategy}: the server counted problems: {stats}")


if __name__ == "__main__":
    main()
