"""WebSocket connections over `SocketIO`, with wsproto: the daemon's and the client's side.

After the HTTP upgrade, a `WebSocket` moves whole messages: `receive()` returns bytes or text
(None once the peer has closed), `send_bytes`/`send_text` queue one message whole, exactly as
`SocketIO.write` does. `keep_alive()` pings an idle peer and closes one that stays silent.
A message bigger than `max_message` closes the connection with 1009 (message too big).

`WsChannel` carries protocol messages on it: one binary message per msgpack map, no length
prefix; the same handshake, methods and errors as the stream transport.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    Pong,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from protocol import ErrorCode, ProtocolViolation, pack_message, unpack_message

from .sockio import SocketIO

#: The WebSocket subprotocol that carries this protocol; its version is the protocol's.
SUBPROTOCOL = "sandbox-supervisor.v1"
MESSAGE_TOO_BIG = 1009
GOING_AWAY = 1001
POLICY_VIOLATION = 1008


@dataclass(frozen=True)
class WebSocketSettings:
    max_message: int = 16 * 1024 * 1024
    #: A ping goes out after this long without a word from the peer...
    ping_interval: float = 20.0
    #: ...and the connection is closed after this long.
    idle_timeout: float = 60.0


class WebSocket:
    """One open WebSocket. One task receives; any number send."""

    def __init__(self, io: SocketIO, ws: WSConnection, settings: WebSocketSettings) -> None:
        self.io = io
        self._ws = ws
        self.settings = settings
        self._pending: list[bytes | str] = []
        self._parts: list[bytes | str] = []
        self._size = 0
        self._closed = False
        self.close_code: int | None = None
        self._heard = time.monotonic()

    async def receive(self) -> bytes | str | None:
        """The next whole message, or None once the connection is closed.

        Exactly one schedule point per message. Cancellation: nothing received is lost.
        """
        if not self._pending and not self._closed:
            # Frames that arrived with the upgrade's last bytes are already in wsproto's
            # buffer, not in the socket: take them first.
            await self._handle_events()
        if self._pending:
            await trio.lowlevel.checkpoint()
            return self._pending.pop(0)
        while not self._closed:
            data = await self.io.receive_some(256 * 1024)
            self._heard = time.monotonic()
            if not data:
                self._closed = True
                break
            try:
                self._ws.receive_data(data)
            except RemoteProtocolError:
                self._closed = True
                break
            await self._handle_events()
            if self._pending:
                return self._pending.pop(0)
        return None

    async def _handle_events(self) -> None:
        for event in self._ws.events():
            if isinstance(event, Message):
                self._size += len(event.data)
                if self._size > self.settings.max_message:
                    self.close(MESSAGE_TOO_BIG, "message too big")
                    self._closed = True
                    return
                self._parts.append(event.data)
                if event.message_finished:
                    text = isinstance(event, TextMessage)
                    joined = "".join(self._parts) if text else b"".join(self._parts)  # type: ignore[arg-type]
                    self._pending.append(joined)
                    self._parts, self._size = [], 0
            elif isinstance(event, Ping):
                await self.io.write(self._ws.send(event.response()))
            elif isinstance(event, CloseConnection):
                self.close_code = event.code
                if self._ws.state is ConnectionState.REMOTE_CLOSING:
                    await self.io.write(self._ws.send(event.response()))
                self._closed = True
            elif isinstance(event, Pong):
                pass  # hearing it is what counts

    async def send_bytes(self, data: bytes) -> None:
        await self._send(BytesMessage(data=data))

    async def send_text(self, text: str) -> None:
        await self._send(TextMessage(data=text))

    async def _send(self, event: Message[Any]) -> None:
        if self._ws.state is not ConnectionState.OPEN:
            raise trio.ClosedResourceError("the WebSocket is closing")
        await self.io.write(self._ws.send(event))

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Queue a close frame (once), ahead of any backlog limit (it is a few bytes); the
        socket closes when the peer answers or goes."""
        if self._ws.state is ConnectionState.OPEN:
            with contextlib.suppress(LocalProtocolError):
                self.io.write_nowait(self._ws.send(CloseConnection(code=code, reason=reason)))

    async def keep_alive(self) -> None:
        """Ping when the peer has been quiet; close when it stays quiet. Runs until cancelled
        or closed."""
        settings = self.settings
        while not self._closed:
            quiet = time.monotonic() - self._heard
            if quiet >= settings.idle_timeout:
                self.close(GOING_AWAY, "idle timeout")
                self.io.close_when_flushed()
                return
            if quiet >= settings.ping_interval:
                await self.io.write(self._ws.send(Ping(payload=b"keep-alive")))
                await trio.sleep(min(settings.ping_interval, settings.idle_timeout - quiet))
            else:
                await trio.sleep(settings.ping_interval - quiet)


class WsChannel:
    """Protocol messages as binary WebSocket messages: a `MessageChannel`."""

    def __init__(self, websocket: WebSocket) -> None:
        self.websocket = websocket

    @property
    def max_frame(self) -> int:
        return self.websocket.settings.max_message

    @max_frame.setter
    def max_frame(self, value: int) -> None:
        self.websocket.settings = dataclasses.replace(self.websocket.settings, max_message=value)

    async def receive(self) -> dict[str, Any] | None:
        message = await self.websocket.receive()
        if message is None:
            return None
        if isinstance(message, str):
            raise ProtocolViolation(ErrorCode.INVALID_FRAME, "text messages are not protocol")
        return unpack_message(message)

    async def send(self, message: dict[str, Any]) -> None:
        await self.websocket.send_bytes(pack_message(message))

    async def flush(self) -> None:
        await self.websocket.io.flush()

    async def flush_forever(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.websocket.keep_alive)
            await self.websocket.io.flush_forever()
            nursery.cancel_scope.cancel()

    def close_when_flushed(self) -> None:
        self.websocket.close(GOING_AWAY)
        self.websocket.io.close_when_flushed()

    async def aclose(self) -> None:
        await self.websocket.io.aclose()


class UpgradeRefused(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"the WebSocket upgrade was refused with HTTP {status}")
        self.status = status


async def connect(
    io: SocketIO,
    host: str,
    path: str,
    *,
    subprotocols: list[str] | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
    settings: WebSocketSettings | None = None,
) -> WebSocket:
    """The client's side of the upgrade. Raises UpgradeRefused, or BrokenResourceError when
    the server hangs up first."""
    ws = WSConnection(ConnectionType.CLIENT)
    request = Request(
        host=host, target=path, subprotocols=subprotocols or [], extra_headers=headers or []
    )
    await io.write(ws.send(request))
    await io.flush()
    while True:
        data = await io.receive_some(64 * 1024)
        if not data:
            raise trio.BrokenResourceError("the server closed the connection in the upgrade")
        ws.receive_data(data)
        for event in ws.events():
            if isinstance(event, AcceptConnection):
                return WebSocket(io, ws, settings or WebSocketSettings())
            if isinstance(event, RejectConnection):
                raise UpgradeRefused(event.status_code)
