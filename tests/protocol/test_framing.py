import struct

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import (
    ErrorCode,
    FrameDecoder,
    Payload,
    ProtocolViolation,
    encode_frame,
    encode_frame_parts,
    pack_message,
    unpack_message,
)
from protocol._framing import GATHER_MAX_PARTS, GATHER_MIN, LARGE_BODY

# Golden bytes: this exact encoding is the wire contract for version 1.
PING = {"type": "request", "id": 1, "method": "runtime.ping", "params": {}}
PING_FRAME = bytes.fromhex(
    "0000002e"
    "84a474797065a772657175657374a2696401a66d6574686f64ac72756e74696d652e70696e67a6706172616d7380"
)


def test_golden_request_frame() -> None:
    assert encode_frame(PING) == PING_FRAME
    decoder = FrameDecoder()
    decoder.feed(PING_FRAME)
    assert decoder.next_message() == PING
    assert decoder.next_message() is None


def test_bytes_travel_as_bin() -> None:
    packed = pack_message({"data": b"\x00\xff"})
    assert b"\xc4\x02\x00\xff" in packed  # bin 8, never str or base64
    assert unpack_message(packed) == {"data": b"\x00\xff"}


def test_length_prefix_above_max_is_refused_before_the_body() -> None:
    decoder = FrameDecoder(max_frame=1024)
    with pytest.raises(ProtocolViolation) as info:
        decoder.feed(struct.pack(">I", 0xFFFFFFFF))
    assert info.value.code == ErrorCode.FRAME_TOO_LARGE
    assert info.value.context == {"length": 0xFFFFFFFF, "max_frame": 1024}


def test_oversized_second_frame_is_refused_once_its_header_arrives() -> None:
    decoder = FrameDecoder(max_frame=64)
    decoder.feed(encode_frame({"type": "x"}) + struct.pack(">I", 65))
    assert decoder.next_message() == {"type": "x"}
    with pytest.raises(ProtocolViolation):
        decoder.next_message()
    with pytest.raises(ProtocolViolation):
        decoder.feed(b"more")


def test_frame_exactly_at_max_is_accepted() -> None:
    body = pack_message({"k": "v" * 20})
    decoder = FrameDecoder(max_frame=len(body))
    decoder.feed(struct.pack(">I", len(body)) + body)
    assert decoder.next_message() == {"k": "v" * 20}


@pytest.mark.parametrize(
    "body",
    [
        msgpack.packb([1, 2]),  # not a map
        msgpack.packb({1: 2}),  # key not a string
        msgpack.packb({b"k": 1}),  # bytes key
        b"\xc1",  # reserved byte
        msgpack.packb({"a": msgpack.ExtType(1, b"x")}),  # extension types are refused
        b"\xa2\xff\xfe",  # invalid UTF-8 in a str
        msgpack.packb({"a": 1}) + b"\x00",  # trailing bytes
        b"",
    ],
)
def test_bad_bodies_are_invalid_frame(body: bytes) -> None:
    with pytest.raises(ProtocolViolation) as info:
        unpack_message(body)
    assert info.value.code == ErrorCode.INVALID_FRAME


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text() | st.binary(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
messages = st.dictionaries(st.text(max_size=10), json_values, max_size=5)


@given(st.lists(messages, max_size=6), st.data())
def test_any_split_decodes_to_the_same_messages(batch: list[dict], data: st.DataObject) -> None:
    stream = b"".join(encode_frame(m) for m in batch)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    decoder = FrameDecoder()
    out = []
    start = 0
    for cut in [*cuts, len(stream)]:
        decoder.feed(stream[start:cut])
        start = cut
        while (message := decoder.next_message()) is not None:
            out.append(message)
    assert out == batch
    assert decoder.buffered == 0


@given(st.binary(max_size=300), st.integers(1, 64))
def test_arbitrary_bytes_only_raise_the_protocols_own_error(blob: bytes, step: int) -> None:
    decoder = FrameDecoder(max_frame=256)
    try:
        for i in range(0, len(blob), step):
            decoder.feed(blob[i : i + step])
            while decoder.next_message() is not None:
                pass
    except ProtocolViolation as exc:
        assert exc.code in (ErrorCode.INVALID_FRAME, ErrorCode.FRAME_TOO_LARGE)


def _joined(value: object) -> object:
    """The message as the peer decodes it: every Payload is plain bytes."""
    if isinstance(value, Payload):
        return b"".join(value.parts)
    if isinstance(value, dict):
        return {key: _joined(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_joined(item) for item in value]
    return value


# Sizes around the bin 8 / bin 16 / bin 32 edges and the gathering threshold.
_SIZES = st.sampled_from([0, 1, 255, 256, GATHER_MIN - 1, GATHER_MIN, 65535, 65536, 70000])
_PARTS = st.lists(_SIZES, min_size=1, max_size=4).map(
    lambda sizes: tuple(bytes([n % 251]) * n for n in sizes)
)


@given(parts=_PARTS, tagged=st.booleans(), twice=st.booleans())
def test_a_payload_frame_is_byte_for_byte_the_joined_frame(
    parts: tuple[bytes, ...], tagged: bool, twice: bool
) -> None:
    payload = Payload(parts)
    event: dict[str, object] = {"type": "stdout", "cursor": "c", "data": payload}
    if tagged:
        event = {"type": "data", "terminal_id": "term-1", "data": payload}
    message = {"type": "event", "id": 7, "event": event}
    if twice:  # the same payload earlier in the message too: that one is joined in place
        message = {"type": "event", "early": payload, "id": 7, "event": event}
    framed = encode_frame_parts(message)
    assert b"".join(framed) == encode_frame(_joined(message))  # type: ignore[arg-type]
    decoder = FrameDecoder(1 << 24)
    decoder.feed(b"".join(framed))
    assert decoder.next_message() == _joined(message)
    if len(payload) >= GATHER_MIN:
        assert framed[2:] == parts  # gathered: the parts themselves, never copied


def test_a_payload_that_is_not_last_is_joined_in_place() -> None:
    message = {"type": "event", "event": {"data": Payload((b"a" * 5000, b"b")), "after": 1}}
    framed = encode_frame_parts(message)
    assert len(framed) == 2
    assert unpack_message(framed[1]) == {
        "type": "event",
        "event": {"data": b"a" * 5000 + b"b", "after": 1},
    }


@given(
    sizes=st.lists(
        st.sampled_from([0, 10, LARGE_BODY - 20, LARGE_BODY, 3 * LARGE_BODY]),
        min_size=1,
        max_size=5,
    ),
    data=st.data(),
)
def test_large_bodies_received_in_place_decode_like_fed_ones(
    sizes: list[int], data: st.DataObject
) -> None:
    """A reader that receives into `reserve()` when it is offered (as StreamChannel does)
    or feeds anyway, in pieces of any size, gets the same messages as one that only feeds."""
    batch = [{"type": "event", "n": i, "data": bytes([i]) * size} for i, size in enumerate(sizes)]
    stream = memoryview(b"".join(encode_frame(m) for m in batch))
    decoder = FrameDecoder()
    pieces = data.draw(st.lists(st.integers(1, 100_000), min_size=1, max_size=12))
    into_room = data.draw(st.lists(st.booleans(), min_size=12, max_size=12))
    out, position = [], 0
    while position < len(stream):
        piece = pieces.pop() if pieces else len(stream)
        room = decoder.reserve()
        if room is not None and not (into_room.pop() if into_room else True):
            room.release()
            room = None
        if room is None:
            decoder.feed(stream[position : position + piece])
            position += min(piece, len(stream) - position)
        else:
            with room:
                taken = min(piece, len(room), len(stream) - position)
                room[:taken] = stream[position : position + taken]
            decoder.commit(taken)
            position += taken
        while (message := decoder.next_message()) is not None:
            out.append(message)
    assert out == batch
    assert decoder.buffered == 0 and decoder.reserve() is None


def test_a_payload_in_many_tiny_parts_is_sent_as_one() -> None:
    """A child that writes a byte at a time: thousands of parts would overflow a gathering
    write (IOV_MAX), so they are joined."""
    parts = tuple(bytes([n % 256]) for n in range(5000))
    message = {"type": "event", "id": 1, "event": {"type": "stdout", "data": Payload(parts)}}
    framed = encode_frame_parts(message)
    assert len(framed) <= 2 + GATHER_MAX_PARTS
    assert b"".join(framed) == encode_frame(_joined(message))  # type: ignore[arg-type]
