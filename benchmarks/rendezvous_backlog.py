"""How long a worker's request to ``horovodrun``'s rendezvous server can wait while other
workers poll it, as Gloo's HTTP store does (a new connection per request, 10 ms apart),
beside busy processes that stand for training ranks; for each listen backlog given
(Horovod's socketserver default is 5, ``patches/0015`` makes it 1024).

    .venv/bin/python benchmarks/rendezvous_backlog.py --pollers 8 --busy 4 --seconds 20

A request whose SYN the kernel dropped for a full accept queue waits its retransmission,
about a second, so the line to read is "over 1 s".
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import time

from horovod.runner.http import http_server

REQUEST = b"GET /scope/key HTTP/1.1\r\nHost: rendezvous\r\nContent-Length: 0\r\n\r\n"


def _get(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        s.sendall(REQUEST)
        s.recv(4096)


def _poll(port: int, stop_at: float) -> None:
    while time.time() < stop_at:
        try:
            _get(port)
        except OSError:
            pass
        time.sleep(0.01)


def _measure(port: int, stop_at: float, out: mp.Queue) -> None:
    waits = []
    while time.time() < stop_at:
        start = time.monotonic()
        try:
            _get(port)
        except OSError:  # a request that failed outright counts as the longest wait
            waits.append(float("inf"))
            continue
        waits.append(time.monotonic() - start)
        time.sleep(0.01)
    out.put(waits)


def _busy(stop_at: float) -> None:
    while time.time() < stop_at:
        pass


def run(backlog: int, pollers: int, busy: int, seconds: float) -> list[float]:
    """Every request's wait, in seconds, of one measuring worker beside the others."""
    # The class attribute socketserver reads when the server starts listening.
    http_server.RendezvousHTTPServer.request_queue_size = backlog
    server = http_server.RendezvousServer()
    port = server.start()
    stop_at = time.time() + seconds
    out: mp.Queue = mp.Queue()
    procs = [mp.Process(target=_busy, args=(stop_at,)) for _ in range(busy)]
    procs += [mp.Process(target=_poll, args=(port, stop_at)) for _ in range(pollers)]
    procs.append(mp.Process(target=_measure, args=(port, stop_at, out)))
    for p in procs:
        p.start()
    waits = out.get()
    for p in procs:
        p.join()
    server.stop()
    return sorted(waits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlogs", default="5,1024")
    parser.add_argument("--pollers", type=int, default=8)
    parser.add_argument("--busy", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    for backlog in (int(b) for b in args.backlogs.split(",")):
        waits = run(backlog, args.pollers, args.busy, args.seconds)
        print(
            f"backlog {backlog:5d}: {len(waits)} requests, "
            f"median {waits[len(waits) // 2] * 1e3:.1f} ms, longest {waits[-1]:.2f} s, "
            f"over 1 s: {sum(w > 1 for w in waits)}",
            flush=True,
        )


if __name__ == "__main__":
    main()
