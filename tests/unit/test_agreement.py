"""The check before ``hvd.init``: options compared, and the nodes' layout learnt, through a
key-value store like the Gloo launcher's rendezvous server."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from horovod_prague.common import agreement
from horovod_prague.common.topology import Topology

OPTIONS = {"strategy": "smart", "group_size": 2, "seed": 0}


class _Store(http.server.BaseHTTPRequestHandler):
    values: dict[str, bytes] = {}

    def do_PUT(self) -> None:  # noqa: N802  (http.server's name)
        self.values[self.path] = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        value = self.values.get(self.path)
        self.send_response(200 if value is not None else 404)
        self.end_headers()
        if value is not None:
            self.wfile.write(value)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[dict[str, bytes], int]]:
    _Store.values = {}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Store)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setattr(agreement, "_inits", 0)  # this check is the process's first init
    yield _Store.values, server.server_address[1]
    server.shutdown()


def _env(port: int, rank: int, size: int, first: int, local_size: int) -> dict[str, str]:
    return {
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1",
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(port),
        "HOROVOD_RANK": str(rank),
        "HOROVOD_SIZE": str(size),
        "HOROVOD_LOCAL_RANK": str(rank - first),
        "HOROVOD_LOCAL_SIZE": str(local_size),
    }


def _other_rank(
    values: dict[str, bytes], rank: int, first: int, local_size: int, **options: object
) -> None:
    facts = {**OPTIONS, **options, agreement.NODE: [first, local_size]}
    values[f"/{agreement.SCOPE}/{rank}.1"] = json.dumps(facts).encode()


def test_ranks_that_agree_learn_the_layout(store):
    values, port = store
    _other_rank(values, 0, first=0, local_size=2)
    assert agreement.check_before_init(OPTIONS, 5.0, _env(port, 1, 2, 0, 2)) == Topology(2, 2)


def test_a_differing_option_is_named(store):
    values, port = store
    _other_rank(values, 0, first=0, local_size=2, seed=7)
    with pytest.raises(ValueError, match=r"rank 1 and rank 0: seed=0 vs 7"):
        agreement.check_before_init(OPTIONS, 5.0, _env(port, 1, 2, 0, 2))


def test_nodes_running_different_numbers_of_ranks_give_their_layout(store):
    """``-H a:1,b:2,c:3``: a rank on b sees 2 ranks on its node and 6 in all, which alone fits
    a job of 3 nodes of 2; the other ranks' nodes give the real layout."""
    values, port = store
    _other_rank(values, 0, first=0, local_size=1)
    for r in (2, 3, 4, 5):
        _other_rank(values, r, first=1 if r == 2 else 3, local_size=2 if r == 2 else 3)
    layout = agreement.check_before_init(OPTIONS, 5.0, _env(port, 1, 6, 1, 2))
    assert layout == Topology.of_nodes([1, 2, 3])


def test_without_a_store_nothing_is_checked():
    assert not agreement.check_before_init(OPTIONS, 1.0, {"HOROVOD_RANK": "0"})
