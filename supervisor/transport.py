"""Message channels: how whole protocol messages move over a byte stream.

The server and client speak to a `MessageChannel`; a second transport (WebSocket binary
messages) implements the same three methods and needs no change to any method handler.
"""

from __future__ import annotations

from typing import Any, Protocol

import trio

from protocol import FrameDecoder, encode_frame

_RECEIVE_SIZE = 256 * 1024


class MessageChannel(Protocol):
    async def receive(self) -> dict[str, Any] | None:
        """The next message, or None at end of stream. Raises ProtocolViolation on bad input."""
        ...

    async def send(self, message: dict[str, Any]) -> None: ...

    async def aclose(self) -> None: ...


class StreamChannel:
    """Length-prefixed msgpack frames over a trio stream (Unix or TCP socket)."""

    def __init__(self, stream: trio.abc.Stream, max_frame: int) -> None:
        self.stream = stream
        self._decoder = FrameDecoder(max_frame)

    @property
    def max_frame(self) -> int:
        return self._decoder.max_frame

    @max_frame.setter
    def max_frame(self, value: int) -> None:
        self._decoder.max_frame = value

    async def receive(self) -> dict[str, Any] | None:
        while True:
            message = self._decoder.next_message()
            if message is not None:
                # A peer that pipelines thousands of frames must not starve other tasks.
                await trio.lowlevel.checkpoint()
                return message
            data = await self.stream.receive_some(_RECEIVE_SIZE)
            if not data:
                return None
            self._decoder.feed(data)

    async def send(self, message: dict[str, Any]) -> None:
        await self.stream.send_all(encode_frame(message))

    async def aclose(self) -> None:
        await self.stream.aclose()
