"""Message channels: how whole protocol messages move over a byte stream.

The server and client speak to a `MessageChannel`; a second transport (WebSocket binary
messages) implements the same methods and needs no change to any method handler.
"""

from __future__ import annotations

from typing import Any, Protocol

import trio

from protocol import FrameDecoder, encode_frame_parts

from .sockio import SocketIO

_RECEIVE_SIZE = 256 * 1024


class MessageChannel(Protocol):
    #: The largest message accepted from the peer.
    max_frame: int

    async def receive(self) -> dict[str, Any] | None:
        """The next message, or None at end of stream. Raises ProtocolViolation on bad input.

        One schedule point per message, so a peer that pipelines cannot starve other tasks.
        """
        ...

    async def send(self, message: dict[str, Any]) -> None:
        """Queue one message whole (or raise). Waits only while the send backlog is full;
        cancelled, it queued nothing. Someone must run `flush_forever()` or `flush()`."""
        ...

    async def flush(self) -> None:
        """Write out everything queued."""
        ...

    async def flush_forever(self) -> None:
        """Write out what is queued as the peer reads, until `close_when_flushed()`."""
        ...

    def close_when_flushed(self) -> None:
        """Refuse further sends; `flush_forever()` returns once the backlog is out."""
        ...

    async def aclose(self) -> None: ...


class StreamChannel:
    """Length-prefixed msgpack frames over a trio socket stream (Unix or TCP)."""

    def __init__(self, stream: trio.SocketStream, max_frame: int) -> None:
        self.io = SocketIO(stream)
        self._decoder = FrameDecoder(max_frame)

    @property
    def max_frame(self) -> int:
        return self._decoder.max_frame

    @max_frame.setter
    def max_frame(self, value: int) -> None:
        self._decoder.max_frame = value

    async def receive(self) -> dict[str, Any] | None:
        message = self._decoder.next_message()
        if message is not None:
            await trio.lowlevel.checkpoint()
            return message
        while True:
            room = self._decoder.reserve()
            if room is None:
                data = await self.io.receive_some(_RECEIVE_SIZE)
                if not data:
                    return None
                self._decoder.feed(data)
            else:
                with room:
                    received = await self.io.receive_into(room)
                if not received:
                    return None
                self._decoder.commit(received)
            message = self._decoder.next_message()
            if message is not None:
                return message

    async def send(self, message: dict[str, Any]) -> None:
        await self.io.write(*encode_frame_parts(message))

    async def flush(self) -> None:
        await self.io.flush()

    async def flush_forever(self) -> None:
        await self.io.flush_forever()

    def close_when_flushed(self) -> None:
        self.io.close_when_flushed()

    async def aclose(self) -> None:
        await self.io.aclose()
