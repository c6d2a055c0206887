"""A deliberately badly behaved peer: raw bytes on a real socket, no client library."""

from __future__ import annotations

from typing import Any

import trio

from protocol import FrameDecoder, encode_frame
from supervisor.addresses import TcpAddress, UnixAddress, parse_address


def hello(**extra: Any) -> bytes:
    return encode_frame({"type": "hello", "versions": [1], "client": "rawpeer/1", **extra})


class RawPeer:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self._decoder = FrameDecoder(1 << 30)

    @classmethod
    async def connect(cls, address: str) -> RawPeer:
        parsed = parse_address(address)
        if isinstance(parsed, UnixAddress):
            return cls(await trio.open_unix_socket(parsed.path))
        assert isinstance(parsed, TcpAddress)
        return cls(await trio.open_tcp_stream(parsed.host, parsed.port))

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def handshake(self) -> dict[str, Any]:
        await self.send(hello())
        welcome = await self.read_one()
        assert welcome["type"] == "welcome", welcome
        return welcome

    async def _receive(self) -> bytes:
        try:
            return await self.stream.receive_some(65536)
        except trio.BrokenResourceError:
            return b""  # a reset after the daemon closed with our input unread

    async def read_one(self) -> dict[str, Any]:
        with trio.fail_after(10):
            while (message := self._decoder.next_message()) is None:
                data = await self._receive()
                assert data, "connection closed before a message arrived"
                self._decoder.feed(data)
        return message

    async def read_until_closed(self) -> list[dict[str, Any]]:
        """Every message the daemon sends until it closes (fails after 10 s); closes ours too."""
        messages = []
        async with self.stream:
            with trio.fail_after(10):
                while True:
                    while (message := self._decoder.next_message()) is not None:
                        messages.append(message)
                    data = await self._receive()
                    if not data:
                        return messages
                    self._decoder.feed(data)

    async def aclose(self) -> None:
        await self.stream.aclose()
