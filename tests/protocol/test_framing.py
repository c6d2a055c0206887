import struct

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import (
    ErrorCode,
    FrameDecoder,
    ProtocolViolation,
    encode_frame,
    pack_message,
    unpack_message,
)

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
