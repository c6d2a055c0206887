"""Serve the protocol on message channels: handshake, concurrent requests, cancel, shutdown.

Transport-agnostic: `serve_channel()` takes any `MessageChannel`; `serve_listeners()` adapts
stream listeners (Unix and TCP sockets) to it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from protocol import (
    Accepted,
    Cancel,
    ErrorCode,
    ProtocolViolation,
    Request,
    ServerConnection,
    ServerPolicy,
    SupervisorError,
)

from .rpc import NOT_YET, Call, ConnectionScope, Methods, cancelled_error, error_for
from .transport import MessageChannel, StreamChannel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerSettings:
    handshake_timeout: float = 10.0
    #: How long a closing connection may take to flush its last frames.
    close_grace: float = 1.0
    #: Requests one connection may have in flight; more are refused with TOO_MANY_REQUESTS,
    #: so a client that pipelines without limit cannot grow the daemon's memory without limit.
    max_in_flight: int = 1024


@dataclass
class _Active:
    scope: trio.CancelScope
    reason: str = "client"


@dataclass(eq=False)
class _Session:
    """The server's side of one open connection."""

    conn: ServerConnection
    channel: MessageChannel
    active: dict[int, _Active] = field(default_factory=dict)
    scope: ConnectionScope = field(default_factory=ConnectionScope)

    draining: bool = False

    def cancel_all(self, reason: str) -> None:
        for active in self.active.values():
            active.reason = reason
            active.scope.cancel()

    def drain(self) -> None:
        """Cancel every request; close the connection once the last reply is written."""
        self.draining = True
        self.cancel_all("shutdown")
        self.close_if_drained()

    def close_if_drained(self) -> None:
        if self.draining and not self.active:
            self.channel.close_when_flushed()


class Server:
    def __init__(
        self, policy: ServerPolicy, methods: Methods, settings: ServerSettings | None = None
    ) -> None:
        self.policy = policy
        self.methods = methods
        self.settings = settings or ServerSettings()
        self.shutting_down = False
        self._accepting = trio.CancelScope()
        self._connections = trio.CancelScope()
        self._sessions: set[_Session] = set()

    async def serve_listeners(
        self,
        listeners: Sequence[trio.SocketListener],
        *,
        task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept on every listener until `shutdown()`; then let open connections finish.

        Cancellation: stops accepting and closes every connection at once.
        """

        async def handle(stream: trio.SocketStream) -> None:
            await self.serve_channel(StreamChannel(stream, self.policy.max_frame))

        with self._connections:
            async with trio.open_nursery() as connections:
                with self._accepting:
                    await trio.serve_listeners(
                        handle,
                        list(listeners),
                        handler_nursery=connections,
                        task_status=task_status,
                    )
                for listener in listeners:
                    await listener.aclose()

    def shutdown(self) -> None:
        """Stop accepting; answer in-flight requests with SHUTTING_DOWN; close connections.

        Each connection closes once its last reply is flushed, and every connection is cut
        after `close_grace` whatever its peer does.
        """
        self.shutting_down = True
        self._accepting.cancel()
        for session in list(self._sessions):
            session.drain()
        self._connections.deadline = trio.current_time() + self.settings.close_grace

    async def serve_channel(self, channel: MessageChannel, *, authenticated: bool = False) -> None:
        """Run one connection to its end. Never raises for anything the peer does.

        `authenticated`: the transport already checked the token (a bearer token on a
        WebSocket upgrade), so the hello need not carry it.
        """
        policy = dataclasses.replace(self.policy, token=None) if authenticated else self.policy
        conn = ServerConnection(policy)
        try:
            accepted = await self._handshake(conn, channel)
            if accepted is not None:
                await channel.send(accepted.welcome.to_wire())
                log.debug("client %s connected (protocol %s)", accepted.client, conn.version)
                await self._serve_open(conn, channel)
        except* ProtocolViolation as group:
            violation = group.exceptions[0]
            assert isinstance(violation, ProtocolViolation)
            log.info("closing connection: %s", violation)
            with trio.move_on_after(self.settings.close_grace):
                await channel.send(conn.error_frame(violation))
                await channel.flush()
        except* (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the peer went away; nobody is left to answer
        except* Exception as group:
            # A bug in the server must cost one connection, never the daemon.
            log.error("connection failed on an internal error", exc_info=group)
        finally:
            with trio.CancelScope(shield=True):
                await channel.aclose()

    async def _handshake(self, conn: ServerConnection, channel: MessageChannel) -> Accepted | None:
        with trio.move_on_after(self.settings.handshake_timeout):
            raw = await channel.receive()
            if raw is None:
                return None
            accepted = conn.receive(raw)
            assert isinstance(accepted, Accepted)
            return accepted
        raise ProtocolViolation(
            ErrorCode.HANDSHAKE_TIMEOUT,
            f"no hello within {self.settings.handshake_timeout:g} s",
        )

    async def _serve_open(self, conn: ServerConnection, channel: MessageChannel) -> None:
        session = _Session(conn, channel)
        self._sessions.add(session)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_loop, channel)
                try:
                    await self._read_loop(session, channel, nursery)
                except ProtocolViolation as exc:
                    log.info("closing connection: %s", exc)
                    session.cancel_all("closing")
                    with trio.move_on_after(self.settings.close_grace):
                        await channel.send(conn.error_frame(exc))
                    channel.close_when_flushed()
                    # The writer flushes the error frame, then ends; a peer that does not
                    # read gets cut off after the grace.
                    nursery.cancel_scope.deadline = trio.current_time() + self.settings.close_grace
                    return
                nursery.cancel_scope.cancel()  # end of stream: nobody is left to answer
        finally:
            self._sessions.discard(session)
            session.scope.close()

    async def _read_loop(
        self, session: _Session, channel: MessageChannel, nursery: trio.Nursery
    ) -> None:
        while True:
            raw = await channel.receive()
            if raw is None:
                return
            message = session.conn.receive(raw)
            if isinstance(message, Request):
                if self.methods.answers_at_once(message.method):
                    # No task, no cancel scope: it does not wait, so there is nothing to cancel.
                    reply = self._answer_at_once(session.conn, message)
                    if reply is not None:
                        await channel.send(reply)
                        continue
                if len(session.active) >= self.settings.max_in_flight:
                    refused = SupervisorError(
                        ErrorCode.TOO_MANY_REQUESTS,
                        f"at most {self.settings.max_in_flight} requests may be in flight "
                        "on one connection",
                        {"max_in_flight": self.settings.max_in_flight},
                    )
                    await channel.send(session.conn.response(message.id, error=refused))
                    continue
                # Registered before the task runs, so an immediate cancel finds it.
                active = _Active(trio.CancelScope())
                session.active[message.id] = active
                nursery.start_soon(self._run_request, session, message, active)
            elif isinstance(message, Cancel):
                session.active[message.id].scope.cancel()

    async def _write_loop(self, channel: MessageChannel) -> None:
        await channel.flush_forever()
        await channel.aclose()

    def _answer_at_once(self, conn: ServerConnection, request: Request) -> dict[str, Any] | None:
        """The reply, or None when the method must wait after all (NOT_YET)."""
        if self.shutting_down:
            return conn.response(request.id, error=cancelled_error(request, "shutdown"))
        try:
            result = self.methods.answer(request)
        except Exception as exc:
            return conn.response(request.id, error=error_for(exc, request))
        return None if result is NOT_YET else conn.response(request.id, result)

    async def _run_request(self, session: _Session, request: Request, active: _Active) -> None:
        conn = session.conn

        async def send_event(event: dict[str, Any]) -> None:
            await session.channel.send(conn.event(request.id, event))

        reply: dict[str, Any] | None = None
        try:
            with active.scope:
                if self.shutting_down:
                    raise cancelled_error(request, "shutdown")
                try:
                    result = await self.methods.dispatch(
                        request, Call(request.id, send_event, session.scope)
                    )
                    reply = conn.response(request.id, result)
                except Exception as exc:
                    reply = conn.response(request.id, error=error_for(exc, request))
        except SupervisorError as exc:
            reply = conn.response(request.id, error=exc)
        finally:
            del session.active[request.id]
        if active.reason == "closing":
            return  # the connection broke a rule; its error frame is the last word
        if active.scope.cancelled_caught:
            reply = conn.response(request.id, error=cancelled_error(request, active.reason))
        if reply is not None:
            # A closing connection drops the reply; the peer gets the close instead.
            with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError):
                await session.channel.send(reply)
        session.close_if_drained()
