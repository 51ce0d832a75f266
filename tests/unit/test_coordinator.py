"""The Group Generator service over TCP: protocol, authentication, errors and timeouts."""

import socket
import struct
import threading

import pytest

from horovod_prague.common import protocol
from horovod_prague.common.config import PragueConfig
from horovod_prague.common.coordinator import GroupGeneratorClient, GroupGeneratorServer
from horovod_prague.common.group_generator import GroupGenerator
from horovod_prague.common.strategies import make_strategy
from horovod_prague.common.topology import Topology

TOKEN = b"k" * 32


@pytest.fixture
def server():
    gg = GroupGenerator(make_strategy(PragueConfig(strategy="static"), Topology(4, 2)))
    with GroupGeneratorServer(gg, TOKEN, fingerprint="fp") as srv:
        yield srv


def client(server, rank=0, token=TOKEN, timeout=5.0):
    host, port = server.address
    return GroupGeneratorClient(host, port, token, rank, timeout)


def test_requests_from_several_ranks(server):
    clients = [client(server, r) for r in range(4)]
    for c in clients:
        c.hello("fp")
    assert [c.next_group() for c in clients] == [(0, 1), (0, 1), (2, 3), (2, 3)]
    assert clients[0].sync(1) == [(0, 1, 2, 3)]
    assert clients[3].finish() == [(0, 1, 2, 3)]
    assert clients[1].sync(2) is None
    assert clients[2].stats()["counts"] == [1, 1, 1, 1]


def test_concurrent_clients_get_consistent_groups(server):
    results = {}

    def ask(rank):
        with client(server, rank) as c:
            results[rank] = [c.next_group() for _ in range(50)]

    threads = [threading.Thread(target=ask, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    for a in range(4):
        for b in range(4):
            assert [g for g in results[a] if b in g] == [g for g in results[b] if a in g]


def test_mismatched_options_are_refused(server):
    with pytest.raises(RuntimeError, match="every rank must use the same options"):
        client(server).hello("other")


def test_wrong_token_is_rejected(server):
    with pytest.raises(protocol.ProtocolError, match="failed authentication"):
        client(server, token=b"x" * 32).next_group()


def test_bad_requests_get_errors_that_name_the_problem(server):
    c = client(server)
    with pytest.raises(RuntimeError, match="unknown operation 'jump'"):
        c.request("jump")
    with pytest.raises(RuntimeError, match=r"rank 9 is not in 0..3"):
        GroupGeneratorClient(*server.address, TOKEN, 9, 5).next_group()
    with pytest.raises(RuntimeError, match="'sync' must be a positive integer"):
        c.request("sync", sync="x")


def test_malformed_frame_gets_an_error_reply(server):
    with socket.create_connection(server.address, timeout=5) as s:
        s.sendall(struct.pack(">I", 40) + b"\x00" * 40)
        reply = protocol.receive(s, TOKEN)
    assert reply["ok"] is False and "authentication" in reply["error"]
    with socket.create_connection(server.address, timeout=5) as s:
        s.sendall(struct.pack(">I", 1 << 30))
        reply = protocol.receive(s, TOKEN)
    assert "frame length" in reply["error"]


def test_decode_rejects_garbage_and_old_versions():
    body = b"not json"
    import hashlib
    import hmac

    mac = hmac.new(TOKEN, body, hashlib.sha256).digest()
    with pytest.raises(protocol.ProtocolError, match="malformed message body"):
        protocol.decode(mac + body, TOKEN)
    frame = protocol.encode({"v": 0, "op": "next"}, TOKEN)
    with pytest.raises(protocol.ProtocolError, match="version mismatch"):
        protocol.decode(frame[4:], TOKEN)


def test_silent_coordinator_times_out_with_a_clear_error():
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        c = GroupGeneratorClient(*listener.getsockname(), TOKEN, rank=2, timeout=0.3)
        with pytest.raises(protocol.CoordinatorTimeout, match="did not answer 'next' within 0.3s"):
            c.next_group()
    finally:
        listener.close()


def test_unreachable_coordinator():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionError, match="could not reach the Prague Group Generator"):
        GroupGeneratorClient("127.0.0.1", port, TOKEN, rank=1, timeout=1)


def test_server_gone_mid_job(server):
    c = client(server)
    c.hello("fp")
    server.close()
    with pytest.raises(ConnectionError, match="Group Generator"):
        c.next_group()
