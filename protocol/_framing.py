"""Length-prefixed msgpack frames for stream transports.

A frame is a 4-byte big-endian unsigned length N, then N bytes holding one msgpack map.
Message-oriented transports (WebSocket) skip the prefix and use `pack_message` /
`unpack_message` directly.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgpack

from ._errors import ErrorCode, ProtocolViolation

_HEADER = struct.Struct(">I")
HEADER_SIZE = _HEADER.size
DEFAULT_MAX_FRAME = 16 * 1024 * 1024


#: Payloads smaller than this are copied into the frame: a part of their own costs more.
GATHER_MIN = 4096
#: A payload in more parts than this (a child that writes a byte at a time) is joined into
#: one part first: so many tiny parts cost more to list than to copy, and a writer may
#: gather only so many in one system call (IOV_MAX is 1024).
GATHER_MAX_PARTS = 64


@dataclass(frozen=True)
class Payload:
    """Bytes held in parts (consecutive reads of a pipe, say), packed as one msgpack bin.

    In the last place of a message (the last value of its last map, however deep), a stream
    frame carries the parts as they are (see `encode_frame_parts`); anywhere else, or in
    `pack_message`, they are joined.
    """

    parts: tuple[bytes, ...]

    def __len__(self) -> int:
        return sum(map(len, self.parts))


def _refuse_ext(code: int, data: bytes) -> object:
    raise ValueError(f"msgpack extension type {code} is not allowed")


def _join_payload(value: object) -> bytes:
    if isinstance(value, Payload):
        return b"".join(value.parts)
    raise TypeError(f"cannot pack a {type(value).__name__}")


def pack_message(message: Mapping[str, Any]) -> bytes:
    """One message as msgpack bytes (bytes as bin, text as str; no extension types)."""
    packed: bytes = msgpack.packb(message, use_bin_type=True, default=_join_payload)
    return packed


def unpack_message(body: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Decode one message body; anything but a msgpack map with string keys is INVALID_FRAME."""
    try:
        message = msgpack.unpackb(body, raw=False, ext_hook=_refuse_ext, strict_map_key=True)
    except Exception as exc:  # msgpack raises a zoo of types for bad input; all mean the same
        raise ProtocolViolation(
            ErrorCode.INVALID_FRAME, f"frame is not valid msgpack: {exc}"
        ) from None
    if not isinstance(message, dict):
        raise ProtocolViolation(
            ErrorCode.INVALID_FRAME, f"frame holds a {type(message).__name__}, not a map"
        )
    if not all(isinstance(key, str) for key in message):
        raise ProtocolViolation(ErrorCode.INVALID_FRAME, "frame map keys must be strings")
    return message


def encode_frame(message: Mapping[str, Any]) -> bytes:
    return b"".join(encode_frame_parts(message))


def encode_frame_parts(message: Mapping[str, Any]) -> tuple[bytes, ...]:
    """The frame in parts, for writers that gather instead of copying them into one buffer:
    the header, the body, and, when the message ends in a `Payload`, the payload's own parts
    after the body's head (so the bytes of a large output event are never copied here).
    At most 2 + GATHER_MAX_PARTS parts."""
    last = _last_value(message)
    size = len(last) if isinstance(last, Payload) else 0
    if size < GATHER_MIN:
        body = pack_message(message)
        return _HEADER.pack(len(body)), body
    assert isinstance(last, Payload)
    packed = pack_message(_with_last_emptied(message))
    # The empty stand-in packs as the very last bytes; swap it for the real bin's header.
    assert packed.endswith(_PACKED_EMPTY_BIN)
    head = packed[: -len(_PACKED_EMPTY_BIN)] + _bin_header(size)
    parts = last.parts if len(last.parts) <= GATHER_MAX_PARTS else (b"".join(last.parts),)
    return (_HEADER.pack(len(head) + size), head, *parts)


_PACKED_EMPTY_BIN = b"\xc4\x00"


def _last_value(message: Mapping[str, Any]) -> object:
    value: object = message
    while isinstance(value, dict) and value:
        value = next(reversed(value.values()))
    return value


def _with_last_emptied(value: Any) -> Any:
    """`value` with its last value (see `_last_value`) replaced by b"": copies only the maps
    on the way down."""
    if isinstance(value, dict) and value:
        key = next(reversed(value))
        return {**value, key: _with_last_emptied(value[key])}
    return b""


def _bin_header(size: int) -> bytes:
    if size < 1 << 8:
        return struct.pack(">BB", 0xC4, size)
    if size < 1 << 16:
        return struct.pack(">BH", 0xC5, size)
    return struct.pack(">BI", 0xC6, size)


#: A frame body at least this big is received into a buffer of its own (see `reserve`).
LARGE_BODY = 64 * 1024


class FrameDecoder:
    """Bytes in (any split), messages out.

    A length prefix above `max_frame` raises FRAME_TOO_LARGE as soon as the 4 header bytes are
    in, so the body is never buffered.

    Bytes come in by `feed(data)`, or, for the body of a large frame, straight into the
    decoder: `reserve()` gives the room left in a buffer the frame's size, the caller
    receives into it (`socket.recv_into`) and says how much with `commit(n)`. That saves a
    copy, and the regrowth of one buffer shared by every frame, per large frame.
    """

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buffer = bytearray()
        self._body: bytearray | None = None  # the large frame's body, being filled
        self._filled = 0

    @property
    def buffered(self) -> int:
        return len(self._buffer) + self._filled

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._body is not None:
            taken = min(len(data), len(self._body) - self._filled)
            with memoryview(data) as view:
                self._body[self._filled : self._filled + taken] = view[:taken]
                self._filled += taken
                if taken == len(data):
                    return
                self._buffer += view[taken:]  # what follows the large frame
        else:
            self._buffer += data
        self._check_header()

    def reserve(self) -> memoryview | None:
        """Room to receive the rest of a large frame's body into, or None: then `feed`.

        Call `commit(n)` after writing n bytes at its start. Release the view first.
        """
        if self._body is None:
            self._start_large_body()
            if self._body is None:
                return None
        return memoryview(self._body)[self._filled :]

    def commit(self, count: int) -> None:
        assert self._body is not None and 0 <= count <= len(self._body) - self._filled
        self._filled += count

    def _start_large_body(self) -> None:
        if len(self._buffer) < HEADER_SIZE:
            return
        self._check_header()
        (length,) = _HEADER.unpack_from(self._buffer)
        if length < LARGE_BODY or len(self._buffer) >= HEADER_SIZE + length:
            return
        body = bytearray(length)
        partial = len(self._buffer) - HEADER_SIZE
        with memoryview(self._buffer) as view:
            body[:partial] = view[HEADER_SIZE:]
        self._buffer.clear()
        self._body, self._filled = body, partial

    def _check_header(self) -> None:
        if len(self._buffer) >= HEADER_SIZE:
            (length,) = _HEADER.unpack_from(self._buffer)
            if length > self.max_frame:
                raise ProtocolViolation(
                    ErrorCode.FRAME_TOO_LARGE,
                    f"frame of {length} bytes exceeds max_frame {self.max_frame}",
                    {"length": length, "max_frame": self.max_frame},
                )

    def next_message(self) -> dict[str, Any] | None:
        """The next complete message, or None until more bytes arrive."""
        if self._body is not None:
            if self._filled < len(self._body):
                return None
            large, self._body, self._filled = self._body, None, 0
            return unpack_message(large)
        if len(self._buffer) < HEADER_SIZE:
            return None
        self._check_header()
        (length,) = _HEADER.unpack_from(self._buffer)
        end = HEADER_SIZE + length
        if len(self._buffer) < end:
            return None
        # Unpacked in place: no copy of the body first.
        with memoryview(self._buffer) as view, view[HEADER_SIZE:end] as body:
            message = unpack_message(body)
        del self._buffer[:end]
        return message
