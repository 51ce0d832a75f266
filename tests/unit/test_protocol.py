"""The frame decoder under fuzzing: it only ever raises ProtocolError, and accepts nothing but
frames made with the job's token, this connection's nonces, this direction and the next
sequence number."""

import hashlib
import hmac
import json
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from horovod_prague.common import protocol
from horovod_prague.common.protocol import Channel, ProtocolError

TOKEN = b"t" * 32
SERVER_NONCE = bytes(range(16))
CLIENT_NONCE = bytes(range(16, 32))


def server_channel(limit: int = protocol.MAX_FRAME) -> Channel:
    return Channel(TOKEN, "server", limit=limit, nonce=SERVER_NONCE)


def client_channel() -> Channel:
    """A client that has the server's greeting, so it can seal frames."""
    channel = Channel(TOKEN, "client", nonce=CLIENT_NONCE)
    channel.feed(server_channel().greeting())
    return channel


def forge(
    body: bytes,
    seq: int = 0,
    token: bytes = TOKEN,
    version: int = protocol.VERSION,
    nonces: bytes = SERVER_NONCE + CLIENT_NONCE,
    direction: bytes = b"C",
) -> bytes:
    """A frame built from the spec in docs/design.md, independently of Channel.seal."""
    seq_bytes = struct.pack(">Q", seq)
    signed = b"prague-gg" + bytes([version]) + nonces + direction + seq_bytes + body
    mac = hmac.new(token, signed, hashlib.sha256).digest()
    return struct.pack(">I", len(seq_bytes) + len(mac) + len(body)) + seq_bytes + mac + body


def drain(channel: Channel, data: bytes, chunks: list[int]) -> tuple[list[dict], bool]:
    """Feed ``data`` in pieces; (messages accepted, whether a ProtocolError ended it)."""
    accepted: list[dict] = []
    pos = 0
    for size in [*chunks, len(data)]:
        piece, pos = data[pos : pos + max(size, 1)], pos + max(size, 1)
        try:
            channel.feed(piece)
            while (message := channel.receive()) is not None:
                accepted.append(message)
        except ProtocolError:
            return accepted, True
        if pos >= len(data):
            break
    return accepted, False


messages = st.lists(
    st.fixed_dictionaries(
        {"op": st.sampled_from(protocol.OPS), "id": st.integers(0, 2**40)},
        optional={"x": st.text(max_size=20), "rank": st.integers(-5, 5)},
    ),
    min_size=1,
    max_size=4,
)
chunks = st.lists(st.integers(1, 64), max_size=8)
DAMAGE = ("flip", "cut", "length")
FORGERY = ("token", "version", "nonce", "direction", "seq", "genuine")


def random_messages(rnd: random.Random) -> list[dict]:
    sent = []
    for _ in range(rnd.randint(1, 4)):
        message = {"op": rnd.choice(protocol.OPS), "id": rnd.randrange(2**40)}
        if rnd.random() < 0.5:
            text = (chr(rnd.randrange(0x20, 0x3000)) for _ in range(rnd.randint(0, 20)))
            message["x"] = "".join(text)
        sent.append(message)
    return sent


def damaged(kind: str, rnd: random.Random) -> tuple[bytes, list[dict]]:
    """A valid stream with one bit flipped, a cut, or a frame length overwritten; and the
    messages of the frames wholly before the damage, the only ones that may be accepted."""
    sent = random_messages(rnd)
    sealer = client_channel()
    frames = [sealer.seal(m) for m in sent]
    stream = bytearray(_client_greeting() + b"".join(frames))
    if kind == "flip":
        where = rnd.randrange(len(stream))
        stream[where] ^= 1 << rnd.randrange(8)
    elif kind == "cut":
        where = rnd.randrange(len(stream))
        del stream[where:]
    else:
        i = rnd.randrange(len(frames))
        where = protocol.GREETING_SIZE + sum(len(f) for f in frames[:i])
        length = rnd.choice([rnd.randrange(2**32), rnd.randrange(200), protocol.MAX_FRAME + 1])
        if length == len(frames[i]) - 4:
            length += 1
        stream[where : where + 4] = struct.pack(">I", length)
    intact, end = [], protocol.GREETING_SIZE
    for message, frame in zip(sent, frames, strict=True):
        end += len(frame)
        if end > where:
            break
        intact.append(message)
    return bytes(stream), intact


def forged_stream(wrong: str, rnd: random.Random) -> bytes:
    """A frame made with one of token, version, nonces, direction or sequence number wrong."""
    fields: dict = {}
    if wrong == "token":
        # Tokens are 32 bytes: HMAC pads shorter keys with zeros, so b"k" and b"k\0" agree.
        fields["token"] = rnd.randbytes(32)
    elif wrong == "version":
        fields["version"] = rnd.choice([v for v in range(256) if v != protocol.VERSION])
    elif wrong == "nonce":
        fields["nonces"] = rnd.choice(
            [rnd.randbytes(32), CLIENT_NONCE + SERVER_NONCE, SERVER_NONCE + rnd.randbytes(16)]
        )
    elif wrong == "direction":
        other = bytes([rnd.choice([b for b in range(256) if b != ord("C")])])
        fields["direction"] = rnd.choice([b"S", other, b"", b"CC"])
    elif wrong == "seq":
        fields["seq"] = rnd.choice([1, 2, rnd.randrange(1, 2**64)])
    return _client_greeting() + forge(json.dumps({"op": "next", "id": 1}).encode(), **fields)


def _client_greeting() -> bytes:
    return Channel(TOKEN, "client", nonce=CLIENT_NONCE).greeting()


@settings(max_examples=10_000, deadline=None)
@given(
    st.one_of(
        st.tuples(st.just("garbage"), st.binary(max_size=200)),
        st.tuples(st.sampled_from(DAMAGE + FORGERY), st.integers(0, 2**64 - 1)),
    )
)
def test_the_decoder_raises_only_protocol_errors_and_accepts_only_genuine_frames(case):
    # Hypothesis draws the kind and a seed and the case is derived from the seed: hypothesis
    # costs about 1 ms per example and per draw, and this keeps 10,000 examples to seconds.
    kind, material = case
    rnd = random.Random(material)
    intact: list[dict] = []
    if kind == "garbage":
        stream = rnd.choice([b"", _client_greeting()[:7], _client_greeting()]) + material
    elif kind in DAMAGE:
        stream, intact = damaged(kind, rnd)
    else:
        stream = forged_stream(kind, rnd)
        if kind == "genuine":
            intact = [{"op": "next", "id": 1}]
    pieces = [rnd.randint(1, 64) for _ in range(rnd.randrange(8))]
    accepted, failed = drain(server_channel(), stream, pieces)
    assert accepted == intact[: len(accepted)]
    if kind in FORGERY:
        assert failed == (kind != "genuine") and accepted == intact
    if kind == "cut":
        assert accepted == intact and not failed


@settings(max_examples=200, deadline=None)
@given(messages, chunks)
def test_genuine_frames_arrive_in_order_however_the_stream_is_split(sent, pieces):
    sealer = client_channel()
    stream = _client_greeting() + b"".join(sealer.seal(m) for m in sent)
    assert drain(server_channel(), stream, pieces) == (sent, False)


@settings(max_examples=200, deadline=None)
@given(messages, st.data())
def test_replayed_reordered_and_reflected_frames_are_refused(sent, data):
    sealer = client_channel()
    frames = [sealer.seal(m) for m in sent]
    server = server_channel()
    server.feed(_client_greeting())
    n = data.draw(st.integers(0, len(frames) - 1))
    for frame in frames[:n]:
        server.feed(frame)
        assert server.receive() is not None
    attack = data.draw(st.sampled_from(["replay", "skip", "reflect", "other_connection"]))
    if attack == "replay" and n > 0:
        frame = frames[data.draw(st.integers(0, n - 1))]
    elif attack == "skip" and n + 1 < len(frames):
        frame = frames[data.draw(st.integers(n + 1, len(frames) - 1))]
    elif attack == "reflect":
        server.seal({"id": 1, "ok": True})
        frame = server.seal({"id": 2, "ok": True})
    else:
        other = Channel(TOKEN, "client")
        other.feed(Channel(TOKEN, "server").greeting())
        for _ in range(n):
            other.seal({})
        frame = other.seal(sent[n])
    server.feed(frame)
    with pytest.raises(ProtocolError) as e:
        server.receive()
    assert e.value.reason in ("bad_mac", "out_of_sequence")


def test_sealed_frames_are_the_frames_the_spec_describes():
    """``seal`` (client to server) and a server's replies are byte for byte what ``forge``
    builds from the spec, frame after frame."""
    client = client_channel()
    server = server_channel()
    server.feed(client.greeting())
    bodies = [{"op": "next", "id": 1}, {"op": "sync", "id": 2, "sync": 1}, {"id": 3, "ok": True}]
    for seq, message in enumerate(bodies):
        body = json.dumps(message, separators=(",", ":")).encode()
        assert client.seal(message) == forge(body, seq=seq)
        assert server.seal(message) == forge(body, seq=seq, direction=b"S")


def test_an_oversized_length_is_refused_before_the_body_arrives():
    server = server_channel(limit=protocol.MAX_HELLO_FRAME)
    server.feed(_client_greeting())
    with pytest.raises(ProtocolError, match="exceeds the limit") as e:
        server.feed(struct.pack(">I", protocol.MAX_HELLO_FRAME + 1))
        server.receive()
    assert e.value.reason == "oversized"
    with pytest.raises(ProtocolError):  # the channel stays refused
        server.receive()


def test_greetings_name_a_version_mismatch():
    server = server_channel()
    with pytest.raises(
        ProtocolError, match=f"peer speaks 1, this side speaks {protocol.VERSION}"
    ) as e:
        server.feed(b"PRGG\x01" + CLIENT_NONCE)
    assert e.value.reason == "version"
    with pytest.raises(ProtocolError, match="not a Prague Group Generator greeting"):
        server_channel().feed(b"GET / HTTP/1.1\r\n")


def test_bodies_must_be_json_objects():
    for body, problem in ((b"not json", "valid UTF-8 JSON"), (b"[1]", "not a JSON object")):
        server = server_channel()
        server.feed(_client_greeting() + forge(body))
        with pytest.raises(ProtocolError, match=problem):
            server.receive()
    deep = server_channel()
    deep.feed(_client_greeting() + forge(b"[" * 5000 + b"]" * 5000))
    with pytest.raises(ProtocolError, match="valid UTF-8 JSON"):
        deep.receive()
