"""The Python client: `async with open_client(address) as client: await client.call(...)`.

One connection carries many concurrent calls. Every failure raises `SupervisorError` with
`.code`, `.message` and `.context`; a connection that fails raises RPC_TRANSPORT_ERROR with
`context["kind"]` one of `connection_failed`, `upgrade_failed`, `peer_closed`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import trio
from wsproto.utilities import RemoteProtocolError

from protocol import (
    DEFAULT_MAX_FRAME,
    ClientConnection,
    ErrorCode,
    Event,
    Response,
    SupervisorError,
    Welcome,
)

from . import SERVER_NAME
from ._file_calls import FileCalls
from ._process_calls import EnvCalls, PortCalls, ProcessCalls
from ._terminal_calls import TerminalCalls
from .addresses import Address, HttpAddress, TcpAddress, UnixAddress, parse_address
from .sockio import SocketIO
from .transport import MessageChannel, StreamChannel
from .websocket import SUBPROTOCOL, UpgradeRefused, WsChannel
from .websocket import connect as ws_connect

CLIENT_NAME = SERVER_NAME.replace("sandbox-supervisor", "sandbox-supervisor-client")
#: Events buffered per stream before the connection's reader waits for the consumer.
STREAM_BUFFER = 256


def transport_error(kind: str, message: str) -> SupervisorError:
    return SupervisorError(ErrorCode.RPC_TRANSPORT_ERROR, message, {"kind": kind})


@dataclass
class _Pending:
    done: trio.Event = field(default_factory=trio.Event)
    response: Response | None = None
    events: trio.MemorySendChannel[dict[str, Any]] | None = None


class EventStream:
    """The events of one streaming call; `result` holds the final answer once iteration ends."""

    def __init__(self, receive: trio.MemoryReceiveChannel[dict[str, Any]], pending: _Pending):
        self._receive = receive
        self._pending = pending
        self.result: Any = None

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> dict[str, Any]:
        try:
            return await self._receive.receive()
        except trio.EndOfChannel:
            await self._pending.done.wait()
            response = self._pending.response
            assert response is not None
            if response.error is not None:
                raise response.error from None
            self.result = response.result
            raise StopAsyncIteration from None


class Client:
    """A connected, handshaken client. Make one with `open_client()`."""

    def __init__(self, channel: MessageChannel, conn: ClientConnection, welcome: Welcome) -> None:
        self.welcome = welcome
        self._channel = channel
        self._conn = conn
        self._pending: dict[int, _Pending] = {}
        self._failure: SupervisorError | None = None
        self.process = ProcessCalls(self)
        self.env = EnvCalls(self)
        self.terminal = TerminalCalls(self)
        self.port = PortCalls(self)
        self.file = FileCalls(self)

    @property
    def instance(self) -> str:
        return self.welcome.instance

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send one request and return its result, or raise its error.

        Cancellation: sends a cancel for the request, which never stops a process or terminal.
        """
        request_id, pending = await self._send_request(method, params, events=None)
        try:
            await pending.done.wait()
        except BaseException:
            with trio.CancelScope(shield=True):
                await self._cancel(request_id)
            raise
        response = pending.response
        if response is None:
            assert self._failure is not None
            raise self._failure
        if response.error is not None:
            raise response.error
        return response.result

    @contextlib.asynccontextmanager
    async def stream(
        self, method: str, params: dict[str, Any] | None = None
    ) -> AsyncIterator[EventStream]:
        """Call a streaming method: iterate the events; `.result` is the final answer.

        Leaving the block early cancels the request (never the process it reads from).
        """
        send, receive = trio.open_memory_channel[dict[str, Any]](STREAM_BUFFER)
        request_id, pending = await self._send_request(method, params, events=send)
        try:
            yield EventStream(receive, pending)
        finally:
            if not pending.done.is_set():
                with trio.CancelScope(shield=True):
                    await self._cancel(request_id)
            receive.close()

    async def _send_request(
        self,
        method: str,
        params: dict[str, Any] | None,
        events: trio.MemorySendChannel[dict[str, Any]] | None,
    ) -> tuple[int, _Pending]:
        if self._failure is not None:
            raise self._failure
        request_id, frame = self._conn.request(method, params)
        pending = _Pending(events=events)
        self._pending[request_id] = pending
        try:
            await self._send(frame)
        except BaseException:
            del self._pending[request_id]
            raise
        return request_id, pending

    async def _cancel(self, request_id: int) -> None:
        frame = self._conn.cancel(request_id)
        if frame is not None and self._failure is None:
            with contextlib.suppress(SupervisorError):
                await self._send(frame)
        pending = self._pending.pop(request_id, None)
        if pending is not None and pending.events is not None:
            pending.events.close()
            # The reply may still come; the reader drops it.

    async def _send(self, frame: dict[str, Any]) -> None:
        try:
            await self._channel.send(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            raise self._fail(transport_error("peer_closed", "connection lost")) from None

    async def _flush_loop(self) -> None:
        try:
            await self._channel.flush_forever()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self._fail(transport_error("peer_closed", "connection lost"))

    def _fail(self, error: SupervisorError) -> SupervisorError:
        if self._failure is None:
            self._failure = error
        for pending in self._pending.values():
            if pending.events is not None:
                pending.events.close()
            pending.done.set()
        return self._failure

    async def _read_loop(self) -> None:
        try:
            while True:
                raw = await self._channel.receive()
                if raw is None:
                    raise transport_error("peer_closed", "the daemon closed the connection")
                message = self._conn.receive(raw)
                if isinstance(message, Event):
                    await self._deliver_event(message)
                elif isinstance(message, Response):
                    self._deliver_response(message)
        except SupervisorError as exc:
            self._fail(exc)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self._fail(transport_error("peer_closed", "connection lost"))

    async def _deliver_event(self, message: Event) -> None:
        pending = self._pending.get(message.id)
        if pending is None or pending.events is None:
            return
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await pending.events.send(message.event)

    def _deliver_response(self, message: Response) -> None:
        pending = self._pending.pop(message.id, None)
        if pending is None:
            return
        pending.response = message
        if pending.events is not None:
            pending.events.close()
        pending.done.set()


async def _connect(address: Address) -> trio.SocketStream:
    try:
        if isinstance(address, UnixAddress):
            return await trio.open_unix_socket(address.path)
        assert isinstance(address, TcpAddress)
        return await trio.open_tcp_stream(address.host, address.port)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise transport_error(
            "connection_failed", f"cannot connect to {address}: {reason}"
        ) from None


async def _open_channel(address: Address) -> MessageChannel:
    """A connected channel: length-prefixed frames, or a WebSocket to `/rpc` for `http:`."""
    stream = await _connect(address)
    if not isinstance(address, HttpAddress):
        return StreamChannel(stream, DEFAULT_MAX_FRAME)
    io = SocketIO(stream)
    try:
        host = f"[{address.host}]" if ":" in address.host else address.host
        websocket = await ws_connect(
            io, f"{host}:{address.port}", "/rpc", subprotocols=[SUBPROTOCOL]
        )
    except UpgradeRefused as exc:
        await io.aclose()
        if exc.status == 401:
            raise SupervisorError(ErrorCode.UNAUTHORIZED, str(exc)) from None
        raise transport_error("upgrade_failed", f"{address}: {exc}") from None
    except (trio.BrokenResourceError, trio.ClosedResourceError, RemoteProtocolError) as exc:
        await io.aclose()
        raise transport_error("upgrade_failed", f"{address}: {exc}") from None
    return WsChannel(websocket)


@contextlib.asynccontextmanager
async def open_client(
    address: Address | str,
    *,
    token: str | None = None,
    instance: str | None = None,
    client_name: str = CLIENT_NAME,
    connect_timeout: float = 10.0,
) -> AsyncIterator[Client]:
    """Connect, do the handshake, and yield a `Client`; close everything on exit.

    Raises SupervisorError: the server's handshake error (UNAUTHORIZED, ACTIVATION_MISMATCH,
    UNSUPPORTED_PROTOCOL_VERSION, ...), or RPC_TRANSPORT_ERROR when nothing answers in time.
    """
    if isinstance(address, str):
        address = parse_address(address)
    conn = ClientConnection(client_name, token=token, instance=instance)
    with trio.move_on_after(connect_timeout) as timeout:
        channel = await _open_channel(address)
    if timeout.cancelled_caught:
        raise transport_error("connection_failed", f"cannot connect to {address}: timed out")
    try:
        welcome: Welcome | None = None
        with trio.move_on_after(connect_timeout):
            welcome = await _handshake(channel, conn)
        if welcome is None:
            raise transport_error(
                "upgrade_failed", f"no answer to hello within {connect_timeout:g} s"
            )
        channel.max_frame = max(welcome.max_frame, DEFAULT_MAX_FRAME)
        client = Client(channel, conn, welcome)
        with _single_errors_unwrapped():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client._read_loop)
                nursery.start_soon(client._flush_loop)
                try:
                    yield client
                finally:
                    nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await channel.aclose()


@contextlib.contextmanager
def _single_errors_unwrapped() -> Iterator[None]:
    """The reader's nursery is an implementation detail: let the caller's own exception
    through as itself, not wrapped in an ExceptionGroup."""
    try:
        yield
    except BaseExceptionGroup as group:
        leaf: BaseException = group
        while isinstance(leaf, BaseExceptionGroup) and len(leaf.exceptions) == 1:
            leaf = leaf.exceptions[0]
        if leaf is group:
            raise
        raise leaf from None


async def _handshake(channel: MessageChannel, conn: ClientConnection) -> Welcome:
    try:
        await channel.send(conn.hello())
        await channel.flush()
        raw = await channel.receive()
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        raw = None
    if raw is None:
        raise transport_error("upgrade_failed", "the daemon closed the connection in the handshake")
    welcome = conn.receive(raw)
    assert isinstance(welcome, Welcome)
    return welcome
