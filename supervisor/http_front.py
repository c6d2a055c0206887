"""The HTTP front (`--listen http:HOST:PORT`): health checks, the protocol on a WebSocket,
and browser terminals.

    GET /healthz          200 {status, instance, server, uptime}: no token, no secrets
    GET /readyz           200 while serving; 503 while starting or shutting down
    GET /rpc              WebSocket: one binary message per protocol message
    GET /terminals/{id}   WebSocket for a browser: keystrokes in, terminal output out

One request per connection (responses say `Connection: close`); anything else is refused
with a status and never reaches the daemon: unknown paths 404, other methods 405, a broken
request or upgrade 400, a bad token 401. Browsers cannot set headers on a WebSocket, so
`/terminals/{id}` also takes a short-lived ticket in its query string (see `tickets`).
"""

from __future__ import annotations

import hmac
import json
import logging
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import h11
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, RejectConnection, Request
from wsproto.utilities import RemoteProtocolError

from protocol import ErrorCode, SupervisorError, TerminalResizeParams, invalid, parse

from . import SERVER_NAME
from .browser_terminals import bridge
from .runtime import Runtime
from .server import Server
from .sockio import SocketIO
from .terminals import TerminalTable
from .tickets import Tickets
from .websocket import SUBPROTOCOL, WebSocket, WebSocketSettings, WsChannel

log = logging.getLogger(__name__)

#: A request's head must arrive within this long, and be at most this big.
REQUEST_TIMEOUT = 10.0
MAX_HEAD = 16 * 1024


@dataclass
class _Head:
    method: str
    path: str
    query: dict[str, str]
    headers: list[tuple[bytes, bytes]]

    def header(self, name: bytes) -> str | None:
        for key, value in self.headers:
            if key == name:
                return value.decode("latin-1")
        return None

    @property
    def wants_websocket(self) -> bool:
        upgrade = (self.header(b"upgrade") or "").lower()
        return upgrade == "websocket"


class HttpFront:
    def __init__(
        self,
        server: Server,
        runtime: Runtime,
        terminals: TerminalTable,
        tickets: Tickets,
        websocket: WebSocketSettings,
    ) -> None:
        self.server = server
        self.runtime = runtime
        self.terminals = terminals
        self.tickets = tickets
        self.websocket = websocket
        self.ready = False

    async def serve(
        self,
        listeners: Sequence[trio.SocketListener],
        *,
        task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept until cancelled (the daemon cancels it last, so health checks see the whole
        shutdown). Cancellation: closes every HTTP connection at once."""
        if not listeners:  # trio.serve_listeners refuses an empty list
            task_status.started([])
            return
        await trio.serve_listeners(self.handle, list(listeners), task_status=task_status)

    async def handle(self, stream: trio.SocketStream) -> None:
        """One HTTP connection. Never raises for anything the peer does."""
        io = SocketIO(stream)
        try:
            await self._handle(io)
        except* (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the peer went away
        except* Exception as group:
            log.error("HTTP connection failed on an internal error", exc_info=group)
        finally:
            with trio.CancelScope(shield=True):
                await io.aclose()

    async def _handle(self, io: SocketIO) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        head = None
        with trio.move_on_after(REQUEST_TIMEOUT):
            head = await self._read_head(io, conn)
        if head is None:
            return
        if isinstance(head, int):
            await self._respond(io, conn, head, {"error": "malformed request"})
            return
        route, _, rest = head.path.partition("/terminals/")
        if head.path not in ("/healthz", "/readyz", "/rpc") and not (route == "" and rest):
            await self._respond(io, conn, 404, {"error": f"no such path: {head.path}"})
        elif head.method != "GET":
            await self._respond(io, conn, 405, {"error": "only GET"}, [(b"allow", b"GET")])
        elif head.path == "/healthz":
            await self._respond(io, conn, 200, self._health())
        elif head.path == "/readyz":
            ready = self.ready and not self.server.shutting_down
            await self._respond(io, conn, 200 if ready else 503, self._health(ready))
        elif not head.wants_websocket:
            await self._respond(io, conn, 400, {"error": "this path needs a WebSocket upgrade"})
        elif head.path == "/rpc":
            await self._rpc(io, conn, head)
        else:
            await self._terminal(io, conn, head, rest)

    async def _read_head(self, io: SocketIO, conn: h11.Connection) -> _Head | int | None:
        received = 0
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError:
                return 400
            if event is h11.NEED_DATA:
                data = await io.receive_some(64 * 1024)
                if not data and conn.their_state is h11.IDLE:
                    return None  # connected and left
                received += len(data)
                conn.receive_data(data)
                continue
            if received - len(conn.trailing_data[0]) > MAX_HEAD:
                # h11 limits only a head still incomplete; one that came whole is measured here.
                return 400
            if isinstance(event, h11.Request):
                target = event.target.decode("latin-1")
                path, _, query = target.partition("?")
                return _Head(
                    event.method.decode("ascii", "replace"),
                    urllib.parse.unquote(path),
                    dict(urllib.parse.parse_qsl(query)),
                    [(k.lower(), v) for k, v in event.headers],
                )
            return 400

    def _health(self, ready: bool | None = None) -> dict[str, Any]:
        health: dict[str, Any] = {
            "status": "stopping" if self.server.shutting_down else "ok",
            "instance": self.runtime.instance,
            "server": SERVER_NAME,
            "uptime": round(self.runtime.uptime, 3),
        }
        if ready is not None:
            health["ready"] = ready
        return health

    async def _respond(
        self,
        io: SocketIO,
        conn: h11.Connection,
        status: int,
        body: dict[str, Any],
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        payload = json.dumps(body).encode()
        response = h11.Response(
            status_code=status,
            reason=HTTPStatus(status).phrase.encode(),
            headers=[
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"connection", b"close"),
                (b"cache-control", b"no-store"),
                *(headers or []),
            ],
        )
        try:
            data = conn.send(response) + (conn.send(h11.Data(data=payload)) or b"")
            data += conn.send(h11.EndOfMessage()) or b""
        except h11.LocalProtocolError:  # the request was too broken to answer in kind
            data = (
                f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nconnection: close\r\n"
                f"content-length: {len(payload)}\r\ncontent-type: application/json\r\n\r\n"
            ).encode() + payload
        await io.write(data)
        with trio.move_on_after(1.0):
            await io.flush()

    def _token_check(self, head: _Head) -> bool | None:
        """None without a bearer token on the request (or without a daemon token to check
        it against); else whether it is the daemon's token."""
        scheme, _, bearer = (head.header(b"authorization") or "").partition(" ")
        token = self.server.policy.token
        if scheme.lower() != "bearer" or token is None:
            return None
        return hmac.compare_digest(bearer.strip(), token)

    async def _upgrade(
        self, io: SocketIO, conn: h11.Connection, head: _Head, *, subprotocol: bool
    ) -> WebSocket | None:
        """Complete the WebSocket handshake that h11 parsed the head of."""
        ws = WSConnection(ConnectionType.SERVER)
        try:
            ws.initiate_upgrade_connection(head.headers, head.path)
            request = next((e for e in ws.events() if isinstance(e, Request)), None)
        except RemoteProtocolError:
            request = None
        if request is None:
            await self._respond(io, conn, 400, {"error": "malformed WebSocket upgrade"})
            return None
        chosen = SUBPROTOCOL if subprotocol and SUBPROTOCOL in request.subprotocols else None
        if request.subprotocols and chosen is None and subprotocol:
            await io.write(ws.send(RejectConnection(status_code=400)))
            return None
        await io.write(ws.send(AcceptConnection(subprotocol=chosen)))
        # Frames the client sent right behind its request came in the same read as the head.
        trailing, _ = conn.trailing_data
        if trailing:
            ws.receive_data(trailing)
        return WebSocket(io, ws, self.websocket)

    async def _rpc(self, io: SocketIO, conn: h11.Connection, head: _Head) -> None:
        if self.ready is False or self.server.shutting_down:
            await self._respond(io, conn, 503, self._health(False))
            return
        bearer = self._token_check(head)
        if bearer is False:
            await self._respond(io, conn, 401, {"error": "wrong bearer token"})
            return
        websocket = await self._upgrade(io, conn, head, subprotocol=True)
        if websocket is not None:
            await self.server.serve_channel(WsChannel(websocket), authenticated=bool(bearer))

    async def _terminal(
        self, io: SocketIO, conn: h11.Connection, head: _Head, terminal_id: str
    ) -> None:
        if self.server.policy.token is not None:
            ticket = head.query.get("ticket", "")
            if not (
                self._token_check(head) or (ticket and self.tickets.check(ticket, terminal_id))
            ):
                await self._respond(io, conn, 401, {"error": "a valid ticket or token is needed"})
                return
        try:
            terminal = self.terminals.registry.require(terminal_id, "attach")
            size = _size(terminal_id, head.query)
        except SupervisorError as exc:
            status = 400 if exc.code == ErrorCode.VALIDATION_FAILED else 404
            await self._respond(io, conn, status, {"error": exc.message, "code": exc.code})
            return
        websocket = await self._upgrade(io, conn, head, subprotocol=False)
        if websocket is not None:
            await bridge(websocket, terminal, cursor=head.query.get("cursor"), size=size)


def _size(terminal_id: str, query: dict[str, str]) -> TerminalResizeParams | None:
    """`cols` and `rows` from the query, checked as `terminal.resize` checks them."""
    if "cols" not in query and "rows" not in query:
        return None
    try:
        window = {name: int(query[name]) for name in ("cols", "rows")}
    except (KeyError, ValueError):
        raise invalid("cols", "cols and rows must both be integers") from None
    return parse(TerminalResizeParams, {"id": terminal_id, **window})
