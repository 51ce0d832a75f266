"""The Group Generator service over TCP: protocol, authentication, limits, errors and timeouts."""

import errno
import select
import socket
import struct
import threading
import time

import pytest

from horovod_prague.common import generator_service, protocol
from horovod_prague.common.config import PragueConfig
from horovod_prague.common.generator_client import GroupGeneratorClient
from horovod_prague.common.generator_service import GroupGeneratorServer
from horovod_prague.common.group_generator import GroupGenerator
from horovod_prague.common.runtime import _addresses
from horovod_prague.common.strategies import AllreduceStrategy, make_strategy
from horovod_prague.common.topology import Topology

TOKEN = b"k" * 32


def generator(size=4):
    return GroupGenerator(make_strategy(PragueConfig(strategy="static"), Topology(size, 2)))


@pytest.fixture
def server():
    with GroupGeneratorServer(generator(), TOKEN, fingerprint="fp") as srv:
        yield srv


def client(server, rank=0, token=TOKEN, timeout=5.0):
    host, port = server.address
    return GroupGeneratorClient(host, port, token, rank, timeout)


class Raw:
    """A hand-driven connection: it greets, then sends what the test says, frames or bytes."""

    def __init__(self, server, token=TOKEN, greet=True):
        self.sock = socket.create_connection(server.address, timeout=5)
        self.channel = protocol.Channel(token, "client")
        self.received = bytearray()
        if greet:
            protocol.greet(self.sock, self.channel)

    def send(self, **message):
        """Seal and send ``message``; the frame's bytes."""
        frame = self.channel.seal(message)
        self.sock.sendall(frame)
        return frame

    def receive(self):
        """The next reply (its bytes are kept in ``received``), or None at EOF."""
        while (message := self.channel.receive()) is None:
            data = self.sock.recv(4096)
            if not data:
                return None
            self.received += data
            self.channel.feed(data)
        return message

    def ask(self, **message):
        self.send(**message)
        return self.receive()

    def hello(self, rank):
        reply = self.ask(op="hello", id=0, rank=rank, fingerprint="fp")
        assert reply["ok"], reply

    def closed_within(self, seconds):
        """Whether the server closes this connection within ``seconds``; what else it sent
        (its greeting, if this side did not read it) is left in ``tail``."""
        self.tail = b""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(4096)
            except ConnectionResetError:
                return True
            except TimeoutError:
                return False
            if not data:
                return True
            self.tail += data
        return False

    def close(self):
        self.sock.close()


def wait_for(predicate, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_requests_from_several_ranks(server):
    clients = [client(server, r) for r in range(4)]
    for c in clients:
        assert c.hello("fp") == 4
    assert [c.next_group() for c in clients] == [(0, 1), (0, 1), (2, 3), (2, 3)]
    assert clients[0].sync(1) == ([], 1)
    assert clients[3].finish() == ([], 1)
    assert clients[1].sync(2).world_averages == 0
    stats = clients[2].stats()
    assert stats["counts"] == [1, 1, 1, 1] and len(stats["silence"]) == 4


def test_concurrent_clients_get_consistent_groups(server):
    results = {}

    def ask(rank):
        with client(server, rank) as c:
            c.hello("fp")
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
    c = client(server)
    with pytest.raises(RuntimeError, match="every rank must use the same options"):
        c.hello("other")
    with pytest.raises(ConnectionError, match="lost after an earlier error"):
        c.next_group()


def test_wrong_token_is_rejected_counted_and_not_answered(server):
    with pytest.raises(ConnectionError, match="closed the connection during 'hello'"):
        client(server, token=b"x" * 32).hello("fp")
    assert server.rejected["bad_mac"] == 1
    with client(server) as c:
        c.hello("fp")
        assert c.stats()["rejected"]["bad_mac"] == 1


def test_bad_requests_get_errors_that_name_the_problem(server):
    c = client(server)
    c.hello("fp")
    with pytest.raises(RuntimeError, match="unknown operation 'jump'"):
        c.request("jump")
    with pytest.raises(RuntimeError, match="'sync' must be a positive integer"):
        c.request("sync", sync="x")
    assert c.next_group() == (0, 1)  # still served
    with pytest.raises(RuntimeError, match=r"rank 9 is not in 0..3"):
        GroupGeneratorClient(*server.address, TOKEN, 9, 5).hello("fp")


def test_a_replayed_frame_on_a_new_connection_is_rejected_and_counted(server):
    first = Raw(server)
    hello = first.send(op="hello", id=0, rank=1, fingerprint="fp")
    assert first.receive()["ok"]
    next_frame = first.send(op="next", id=1)
    assert first.receive()["group"] == [0, 1]
    for captured in (hello, next_frame):
        replay = Raw(server)
        replay.sock.sendall(captured)
        assert replay.closed_within(5) and replay.tail == b""
    assert server.rejected["bad_mac"] == 2
    assert first.ask(op="next", id=2)["ok"]  # the genuine connection is unaffected


def test_a_frame_replayed_or_reflected_on_its_own_connection_is_rejected(server):
    raw = Raw(server)
    raw.hello(1)
    frame = raw.send(op="next", id=1)
    assert raw.receive()["ok"]
    raw.sock.sendall(frame)
    reply = raw.receive()
    assert reply == {"id": None, "ok": False, "error": reply["error"], "closing": True}
    assert "replayed or reordered" in reply["error"]
    assert raw.closed_within(5)
    assert server.rejected["out_of_sequence"] == 1

    raw = Raw(server)
    raw.hello(2)
    raw.sock.sendall(bytes(raw.received))  # the server's own reply, sent back
    assert "failed authentication" in raw.receive()["error"]
    assert server.rejected["bad_mac"] == 1


def test_a_request_before_hello_is_refused(server):
    raw = Raw(server)
    reply = raw.ask(op="next", id=1, rank=1)
    assert reply["ok"] is False and reply["closing"] and "must be 'hello'" in reply["error"]
    assert raw.closed_within(5)
    assert server.rejected["before_hello"] == 1
    garbage = Raw(server)  # no valid MAC: closed without a word
    garbage.sock.sendall(struct.pack(">I", 40) + b"\x00" * 40)
    assert garbage.closed_within(5) and garbage.tail == b""
    unframed = Raw(server, greet=False)
    unframed.sock.sendall(b"GET / HTTP/1.1\r\n\r\n")
    assert unframed.closed_within(5)
    assert server.rejected["bad_mac"] == 1 and server.rejected["malformed"] == 1


def test_a_rank_has_one_live_connection(server):
    first = client(server, rank=1)
    first.hello("fp")
    second = client(server, rank=1)
    with pytest.raises(RuntimeError, match="rank 1 is already connected"):
        second.hello("fp")
    assert server.rejected["rank_taken"] == 1
    assert first.next_group() == (0, 1)
    first.close()
    assert wait_for(lambda: server.connections == 0)
    again = client(server, rank=1)  # once the first is gone, the rank may connect again
    again.hello("fp")
    assert 1 in again.next_group()


def test_a_connection_speaks_only_for_its_own_rank(server):
    raw = Raw(server)
    raw.hello(1)
    assert raw.ask(op="next", id=1, rank=1)["group"] == [0, 1]
    reply = raw.ask(op="finish", id=2, rank=2)
    assert reply["closing"] and "cannot speak for 2" in reply["error"]
    assert raw.closed_within(5)
    assert server.rejected["rank_mismatch"] == 1
    assert server.generator.active == {0, 1, 2, 3}


def test_oversized_lengths_are_refused_before_the_body_is_read(server):
    raw = Raw(server)
    raw.sock.sendall(struct.pack(">I", protocol.MAX_HELLO_FRAME + 1))  # the header alone
    assert raw.closed_within(5) and raw.tail == b""
    raw = Raw(server)
    raw.hello(1)
    assert raw.ask(op="next", id=1, pad="x" * protocol.MAX_HELLO_FRAME)["ok"]
    raw.sock.sendall(struct.pack(">I", 1 << 30))
    reply = raw.receive()
    assert reply["closing"] and "exceeds the limit 65536" in reply["error"]
    assert raw.closed_within(5)
    assert server.rejected["oversized"] == 2


def test_a_connection_without_hello_is_cut_after_the_handshake_limit():
    with GroupGeneratorServer(generator(), TOKEN, "fp", handshake_timeout=1.0) as srv:
        ranked = client(srv, rank=1)
        ranked.hello("fp")
        start = time.monotonic()
        silent, greeted = Raw(srv, greet=False), Raw(srv)
        assert silent.closed_within(6) and greeted.closed_within(6)
        assert 1.0 <= time.monotonic() - start < 6
        assert srv.dropped["handshake_timeout"] == 2
        late = Raw(srv)  # a later round of the expiry check, ranked is still served
        assert late.closed_within(5)
        assert ranked.next_group() == (0, 1)
        assert srv.dropped["idle_timeout"] == 0


def test_idle_and_stalled_ranks_are_cut_when_limits_are_set():
    with GroupGeneratorServer(
        generator(), TOKEN, "fp", handshake_timeout=1.0, idle_timeout=1.0
    ) as srv:
        idle = Raw(srv)
        idle.hello(1)
        stalled = Raw(srv)
        stalled.hello(2)
        stalled.sock.sendall(stalled.channel.seal({"op": "next", "id": 1})[:10])
        assert idle.closed_within(5) and stalled.closed_within(5)
        assert srv.dropped["idle_timeout"] == 1 and srv.dropped["stalled"] == 1


def test_many_idle_connections_cost_no_threads():
    with GroupGeneratorServer(
        generator(), TOKEN, "fp", max_pending=250, handshake_timeout=60
    ) as srv:
        before = threading.active_count()
        idle = [socket.create_connection(srv.address, timeout=5) for _ in range(200)]
        try:
            assert wait_for(lambda: srv.connections == 200)
            assert threading.active_count() == before
            with client(srv, rank=2) as c:
                c.hello("fp")
                assert c.next_group() == (2, 3)
        finally:
            for s in idle:
                s.close()


def test_the_oldest_pending_connections_make_way_for_new_ones():
    with GroupGeneratorServer(generator(), TOKEN, "fp", max_pending=3) as srv:
        raws = [Raw(srv) for _ in range(5)]
        assert raws[0].closed_within(5) and raws[1].closed_within(5)
        assert srv.dropped["evicted"] == 2
        raws[4].hello(0)
        assert raws[4].ask(op="next", id=1)["ok"]


class FailingGenerator(GroupGenerator):
    def next_group(self, rank):
        if rank == 1:
            raise ZeroDivisionError("boom")
        return super().next_group(rank)


def test_a_failing_strategy_is_reported_and_the_server_keeps_serving():
    gg = FailingGenerator(make_strategy(PragueConfig(strategy="static"), Topology(4, 2)))
    with GroupGeneratorServer(gg, TOKEN, "fp") as srv:
        one, two = client(srv, rank=1), client(srv, rank=2)
        one.hello("fp")
        two.hello("fp")
        with pytest.raises(
            RuntimeError, match="the Group Generator failed: ZeroDivisionError: boom"
        ):
            one.next_group()
        assert two.next_group() == (2, 3)
        assert one.stats()["generator_errors"] == 1 == srv.generator_errors


class BlockingGenerator(GroupGenerator):
    def __init__(self, strategy):
        super().__init__(strategy)
        self.release = threading.Event()

    def next_group(self, rank):
        self.release.wait(10)
        return super().next_group(rank)


def test_after_a_timeout_the_client_reports_the_lost_connection():
    gg = BlockingGenerator(make_strategy(PragueConfig(strategy="static"), Topology(4, 2)))
    with GroupGeneratorServer(gg, TOKEN, "fp") as srv:
        c = client(srv, rank=1)
        c.hello("fp")
        c.timeout = 0.3  # only for the call meant to time out
        with pytest.raises(
            protocol.GroupGeneratorTimeout, match="did not answer 'next' within 0.3s"
        ):
            c.next_group()
        gg.release.set()  # the late reply goes to a closed socket
        with pytest.raises(
            ConnectionError, match=r"lost after an earlier error \('next' timed out"
        ):
            c.next_group()
        with client(srv, rank=2) as other:
            other.hello("fp")
            assert other.next_group() == (2, 3)


class SlowToNoteWaits(GroupGenerator):
    def __init__(self, strategy):
        super().__init__(strategy)
        self.release = threading.Event()

    def note_waiting(self, rank, group, collective=None):
        self.release.wait(10)
        super().note_waiting(rank, group, collective)


@pytest.mark.parametrize("late", [1, 2])
def test_a_report_answered_late_leaves_the_connection_working(late):
    """A slow-wait report that times out is given up (``script_waits.report_waiting`` swallows
    the error); its late reply is dropped, and the rank's next requests are answered."""
    gg = SlowToNoteWaits(make_strategy(PragueConfig(strategy="static"), Topology(4, 2)))
    with GroupGeneratorServer(gg, TOKEN, "fp") as srv:
        c = client(srv, rank=1)
        c.hello("fp")
        c.timeout = 0.3  # only for the calls meant to time out
        for _ in range(late):
            with pytest.raises(protocol.GroupGeneratorTimeout, match="did not answer 'waiting'"):
                c.waiting((0, 1))
        gg.release.set()
        c.timeout = 5.0
        assert c.next_group() == (0, 1)
        assert 1 in c.next_group()
        c.waiting((0, 1))
        assert c.stats()["waits"][1] == [0, 1]
        assert srv.rejected == dict.fromkeys(srv.rejected, 0)


class RefusesWaitsLate(SlowToNoteWaits):
    def note_waiting(self, rank, group, collective=None):
        self.release.wait(10)
        raise generator_service._Refused("no waits today", close=True)


def test_a_late_reply_the_server_closed_after_is_reported_with_its_error():
    gg = RefusesWaitsLate(make_strategy(PragueConfig(strategy="static"), Topology(4, 2)))
    with GroupGeneratorServer(gg, TOKEN, "fp") as srv:
        c = client(srv, rank=1)
        c.hello("fp")
        c.timeout = 0.3  # only for the call meant to time out
        with pytest.raises(protocol.GroupGeneratorTimeout):
            c.waiting((0, 1))
        gg.release.set()
        c.timeout = 5.0
        with pytest.raises(ConnectionError, match="after refusing an earlier 'waiting'.*no waits"):
            c.next_group()
        with pytest.raises(ConnectionError, match="lost after an earlier error"):
            c.next_group()


class ScriptedServer:
    """Greets as the Group Generator does, then answers its k-th request with the replies
    ``answers[k](request)`` lists, sealed in order."""

    def __init__(self, answers):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()
        threading.Thread(target=self._serve, args=(answers,), daemon=True).start()

    def _serve(self, answers):
        sock, _ = self.listener.accept()
        with sock, self.listener:
            channel = protocol.Channel(TOKEN, "server")
            protocol.greet(sock, channel)
            for answer in answers:
                request = protocol.receive(sock, channel)
                if request is None:
                    return
                for reply in answer(request):
                    sock.sendall(channel.seal(reply))
            protocol.receive(sock, channel)


def test_only_the_one_late_reply_of_a_request_given_up_is_dropped():
    """The client drops exactly one reply per request given up on, the oldest one's: a
    second reply with that id is refused as any reply to no pending request is."""
    release = threading.Event()

    def late_and_repeated(request):
        release.wait(5)
        return [{"id": request["id"], "ok": True}] * 2

    srv = ScriptedServer(
        [
            lambda r: [{"id": r["id"], "ok": True, "size": 4}],
            late_and_repeated,
            lambda r: [{"id": r["id"], "ok": True, "group": [0, 1]}],
        ]
    )
    c = GroupGeneratorClient(*srv.address, TOKEN, rank=1, timeout=5.0)
    c.hello("fp")
    c.timeout = 0.3  # only for the call meant to time out
    with pytest.raises(protocol.GroupGeneratorTimeout, match="'waiting'"):
        c.waiting((0, 1))
    release.set()
    c.timeout = 5.0
    with pytest.raises(protocol.ProtocolError, match="reply id 2 does not match request id 3"):
        c.next_group()
    with pytest.raises(
        ConnectionError, match=r"lost after an earlier error \(reply id 2 to request 3"
    ):
        c.next_group()


def test_a_silent_coordinator_times_out_with_a_clear_error():
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        with pytest.raises(protocol.GroupGeneratorTimeout, match="did not greet within 0.3s"):
            GroupGeneratorClient(*listener.getsockname(), TOKEN, rank=2, timeout=0.3)
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


def test_bad_input_never_stops_the_server(server):
    ranked = client(server, rank=3)
    ranked.hello("fp")
    valid = protocol.Channel(TOKEN, "client")
    for junk in (
        b"",
        b"\x00" * 100,
        b"PRGG\x01" + b"n" * 16,
        b"PRGG" + bytes([protocol.VERSION]) + b"n" * 16 + struct.pack(">I", 3) + b"abc",
        b"PRGG" + bytes([protocol.VERSION]) + b"n" * 16 + b"\xff" * 4,
        valid.greeting() + b"\x00\x00",
    ):
        raw = Raw(server, greet=False)
        raw.sock.sendall(junk)
        raw.sock.shutdown(socket.SHUT_WR)
        assert raw.closed_within(5)
        assert ranked.next_group()
    rejected = ranked.stats()["rejected"]
    assert rejected["malformed"] == 2 and rejected["version"] == 1
    assert rejected["oversized"] == 1 and rejected["truncated"] == 1


def connect_and_reset(address):
    """Connect, then close with SO_LINGER {on, 0}: the peer gets a reset, not a FIN."""
    sock = socket.create_connection(address, timeout=5)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class HoldsTheServer(GroupGenerator):
    """Keeps the server's thread inside ``next_group`` until ``release`` is set."""

    def __init__(self, strategy):
        super().__init__(strategy)
        self.entered = threading.Event()
        self.release = threading.Event()

    def next_group(self, rank):
        self.entered.set()
        self.release.wait(10)
        return super().next_group(rank)


def test_peers_that_reset_at_once_never_stop_the_server():
    """No one who can merely connect may stop the Group Generator: a connection reset before
    the server sends its greeting closes that connection alone."""
    gg = HoldsTheServer(make_strategy(PragueConfig(strategy="static"), Topology(4, 2)))
    with GroupGeneratorServer(gg, TOKEN, "fp") as srv:
        address = srv.address
        ranked = client(srv, rank=1)
        ranked.hello("fp")
        # While the server's thread is held, the resets arrive before it accepts: the
        # greeting then goes to sockets the peers have already reset.
        groups = []
        asking = threading.Thread(target=lambda: groups.append(ranked.next_group()))
        asking.start()
        assert gg.entered.wait(5)
        for _ in range(20):
            connect_and_reset(address)
        gg.release.set()
        asking.join(10)
        assert groups == [(0, 1)]
        assert 1 in ranked.next_group()
        # And interleaved with a rank's requests.
        for _ in range(200):
            connect_and_reset(address)
            assert 1 in ranked.next_group()
        assert srv._thread.is_alive()
        with client(srv, rank=2) as late:
            assert late.hello("fp") == 4
            assert 2 in late.next_group()
        assert wait_for(lambda: srv.connections == 1)  # the resets left nothing open
        assert srv.rejected == dict.fromkeys(srv.rejected, 0)


class FailingListener:
    """The server's listening socket, whose ``accept`` first raises ``errors`` in turn."""

    def __init__(self, sock, errors):
        self.sock = sock
        self.errors = list(errors)

    def accept(self):
        if self.errors:
            raise self.errors.pop(0)
        return self.sock.accept()

    def __getattr__(self, name):
        return getattr(self.sock, name)


def test_accept_errors_lose_at_most_the_one_connection(server, caplog):
    """``accept`` reports a connection that failed while queued (ECONNABORTED) by raising:
    the server goes on to the next one; out of descriptors (EMFILE), it pauses accepting
    until its next scan. Either way it keeps serving."""
    ranked = client(server, rank=1)
    ranked.hello("fp")
    listener = FailingListener(
        server._listener,
        [
            ConnectionAbortedError(errno.ECONNABORTED, "Software caused connection abort"),
            OSError(errno.EMFILE, "Too many open files"),
        ],
    )
    server._listener = listener
    with caplog.at_level("WARNING", logger=generator_service.__name__):
        with client(server, rank=2) as late:
            assert late.hello("fp") == 4
            assert late.next_group() == (2, 3)
    assert listener.errors == []
    assert [r.getMessage() for r in caplog.records] == [
        "Prague Group Generator: accept failed: [Errno 24] Too many open files"
    ]
    assert ranked.next_group() == (0, 1) and server._thread.is_alive()


def test_a_rank_that_never_reads_its_replies_is_cut_and_the_others_are_served():
    gg = GroupGenerator(AllreduceStrategy(Topology(2000, 2000), 2, 1, 0))
    with GroupGeneratorServer(gg, TOKEN, "fp", handshake_timeout=1.0) as srv:
        ranked = client(srv, rank=1)
        ranked.hello("fp")
        deaf = Raw(srv)
        deaf.hello(2)
        # Requests for replies of about 50 kB each, far more than the socket buffers hold.
        requests = b"".join(deaf.channel.seal({"op": "stats", "id": i}) for i in range(1, 400))
        deaf.sock.setblocking(False)
        sent = 0
        deadline = time.monotonic() + 10
        while sent < len(requests) and srv.dropped["stalled"] == 0:
            assert time.monotonic() < deadline
            try:
                sent += deaf.sock.send(requests[sent:])
            except BlockingIOError:
                assert ranked.next_group()  # served while the deaf rank's replies pile up
                select.select([], [deaf.sock], [], 0.1)
            except ConnectionError:
                break
        assert wait_for(lambda: srv.dropped["stalled"] == 1 and srv.connections == 1)
        assert srv.lost == {2}
        assert ranked.next_group()


def test_the_server_binds_the_address_it_advertises(monkeypatch):
    for key in ("HOROVOD_GLOO_IFACE", "NCCL_SOCKET_IFNAME", "HOROVOD_HOSTNAME"):
        monkeypatch.delenv(key, raising=False)
    assert _addresses(PragueConfig(), across_hosts=False) == ("127.0.0.1", "127.0.0.1")
    assert _addresses(PragueConfig(coordinator_addr="198.18.0.9"), across_hosts=True) == (
        "198.18.0.9",
        "198.18.0.9",
    )
    # Across hosts: the address on the interface the launcher chose (here loopback's).
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "lo")
    assert _addresses(PragueConfig(), across_hosts=True) == ("127.0.0.1", "127.0.0.1")
    monkeypatch.setenv("HOROVOD_GLOO_IFACE", "no-such-nic0")
    with pytest.raises(OSError, match="interface 'no-such-nic0'.* does not exist"):
        _addresses(PragueConfig(), across_hosts=True)


def test_a_host_name_that_resolves_to_loopback_is_refused_across_hosts(monkeypatch):
    for key in ("HOROVOD_GLOO_IFACE", "NCCL_SOCKET_IFNAME"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOROVOD_HOSTNAME", "localhost")
    with pytest.raises(OSError, match="'localhost' resolves to 127.*--network-interface"):
        _addresses(PragueConfig(), across_hosts=True)


def test_replies_that_grow_with_the_job_reach_the_client():
    gg = GroupGenerator(AllreduceStrategy(Topology(40_000, 40_000), 2, 1, 0))
    with GroupGeneratorServer(gg, TOKEN, "fp") as srv, client(srv, rank=7) as c:
        c.hello("fp")
        assert len(c.stats()["counts"]) == 40_000  # a reply over 64 KiB


def test_ranks_say_what_they_wait_on_and_stats_tell_everyone(server):
    clients = [client(server, r) for r in range(4)]
    for c in clients:
        c.hello("fp")
    clients[1].waiting((1, 2))
    clients[3].waiting((1, 3))
    assert clients[0].stats()["waits"] == [None, [1, 2], None, [1, 3]]
    clients[1].next_group()
    assert clients[0].stats()["waits"] == [None, None, None, [1, 3]]
    for bad in ([0, 2], [1], "1,2", [1, True], [1, 2.0]):
        with pytest.raises(RuntimeError, match="not a group of rank 1|must be a list of ranks"):
            clients[1].request("waiting", group=bad)
    assert clients[0].stats()["waits"] == [None, None, None, [1, 3]]


def test_stats_name_the_ranks_whose_connection_ended_before_they_finished(server):
    """A rank whose connection ends while it still trains is *lost* (its process or host most
    likely died); one that finished first, or never connected, is not."""
    clients = [client(server, r) for r in range(4)]
    for c in clients[:3]:
        c.hello("fp")
    clients[1].finish()
    clients[1].close()
    clients[2].close()
    deadline = time.monotonic() + 5
    while not (lost := clients[0].stats()["lost"]) and time.monotonic() < deadline:
        time.sleep(0.01)  # the server sees the closed connection on its own thread
    assert lost == [2]
    assert server.lost == {2}
