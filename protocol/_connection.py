"""The connection state machines: what each side may send or receive, and when.

All rules about ordering live here, in the `_RECEIVABLE` table and the two classes below.
Transports (length-prefixed streams, WebSocket messages) only move maps; they decide nothing.
"""

from __future__ import annotations

import enum
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._errors import ErrorCode, ProtocolViolation, SupervisorError
from ._messages import (
    PROTOCOL_VERSIONS,
    Cancel,
    ErrorFrame,
    Event,
    Hello,
    Message,
    Request,
    Response,
    Welcome,
    parse_message,
)


class State(enum.Enum):
    HANDSHAKE = "handshake"
    OPEN = "open"
    CLOSED = "closed"


# Which message types each side may receive in each state. Anything else is a violation.
_RECEIVABLE: dict[tuple[str, State], frozenset[type]] = {
    ("server", State.HANDSHAKE): frozenset({Hello}),
    ("server", State.OPEN): frozenset({Request, Cancel}),
    ("client", State.HANDSHAKE): frozenset({Welcome, ErrorFrame}),
    ("client", State.OPEN): frozenset({Response, Event, ErrorFrame}),
}


@dataclass(frozen=True)
class Accepted:
    """The handshake succeeded; send `welcome` to the client."""

    welcome: Welcome
    client: str


@dataclass(frozen=True)
class ServerPolicy:
    """What the server requires of a hello and tells in its welcome."""

    instance: str
    server: str
    capabilities: Sequence[str]
    max_frame: int
    token: str | None = None
    versions: Sequence[int] = PROTOCOL_VERSIONS


class ServerConnection:
    """The server side: hello in, welcome out; then requests and cancels in, replies out.

    `receive()` raises ProtocolViolation when the client broke a rule; the caller then sends
    `error_frame(exc)` and closes. Request ids are tracked from request to final response, so
    events and responses for ids that are not in flight are refused locally (a server bug).
    """

    def __init__(self, policy: ServerPolicy) -> None:
        self.policy = policy
        self.state = State.HANDSHAKE
        self.version: int | None = None
        self._in_flight: set[int] = set()

    @property
    def in_flight(self) -> frozenset[int]:
        return frozenset(self._in_flight)

    def receive(self, raw: dict[str, Any]) -> Accepted | Request | Cancel | None:
        """One decoded map from the client; None means nothing to do (a late cancel)."""
        try:
            message = self._receive(raw)
        except ProtocolViolation:
            self.state = State.CLOSED
            raise
        return message

    def _receive(self, raw: dict[str, Any]) -> Accepted | Request | Cancel | None:
        if self.state is State.CLOSED:
            raise ProtocolViolation(ErrorCode.INVALID_FRAME, "connection is closed")
        if self.state is State.HANDSHAKE and raw.get("type") != "hello":
            raise ProtocolViolation(
                ErrorCode.HANDSHAKE_REQUIRED,
                f"the first message must be hello, got {raw.get('type')!r}",
            )
        message = parse_message(raw)
        _check_receivable("server", self.state, message)
        if isinstance(message, Hello):
            return self._accept(message)
        if isinstance(message, Request):
            if message.id in self._in_flight:
                raise ProtocolViolation(
                    ErrorCode.REQUEST_ID_IN_USE,
                    f"request id {message.id} is already in flight",
                    {"id": message.id},
                )
            self._in_flight.add(message.id)
            return message
        assert isinstance(message, Cancel)
        return message if message.id in self._in_flight else None

    def _accept(self, hello: Hello) -> Accepted:
        policy = self.policy
        common = set(hello.versions) & set(policy.versions)
        if not common:
            raise ProtocolViolation(
                ErrorCode.UNSUPPORTED_PROTOCOL_VERSION,
                f"client offers versions {hello.versions}, server supports {list(policy.versions)}",
                {"supported": list(policy.versions), "offered": hello.versions},
            )
        if policy.token is not None and not (
            hello.token is not None and hmac.compare_digest(hello.token, policy.token)
        ):
            reason = "missing" if hello.token is None else "wrong"
            raise ProtocolViolation(
                ErrorCode.UNAUTHORIZED, f"a valid token is required ({reason} token)"
            )
        if hello.instance is not None and hello.instance != policy.instance:
            raise ProtocolViolation(
                ErrorCode.ACTIVATION_MISMATCH,
                "this daemon is not the runtime instance the client expects",
                {"expected": hello.instance, "actual": policy.instance},
            )
        self.version = max(common)
        self.state = State.OPEN
        welcome = Welcome(
            version=self.version,
            instance=policy.instance,
            server=policy.server,
            capabilities=list(policy.capabilities),
            max_frame=policy.max_frame,
        )
        return Accepted(welcome, hello.client)

    def event(self, request_id: int, event: dict[str, Any]) -> dict[str, Any]:
        self._require_in_flight(request_id)
        return Event(request_id, event).to_wire()

    def response(
        self, request_id: int, result: Any = None, error: SupervisorError | None = None
    ) -> dict[str, Any]:
        self._require_in_flight(request_id)
        self._in_flight.discard(request_id)
        return Response(request_id, result, error).to_wire()

    def error_frame(self, error: SupervisorError) -> dict[str, Any]:
        self.state = State.CLOSED
        return ErrorFrame(error).to_wire()

    def _require_in_flight(self, request_id: int) -> None:
        if request_id not in self._in_flight:
            raise RuntimeError(f"request {request_id} is not in flight")


class ClientConnection:
    """The client side: hello out, welcome in; then requests out, events and responses in.

    An `error` frame from the server raises it as SupervisorError: the server closes after it.
    """

    def __init__(
        self,
        client: str,
        *,
        token: str | None = None,
        instance: str | None = None,
        versions: Sequence[int] = PROTOCOL_VERSIONS,
    ) -> None:
        self.state = State.HANDSHAKE
        self.welcome: Welcome | None = None
        self._hello = Hello(list(versions), client, token, instance)
        self._next_id = 1
        self._in_flight: set[int] = set()

    def hello(self) -> dict[str, Any]:
        return self._hello.to_wire()

    def request(
        self, method: str, params: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        if self.state is not State.OPEN:
            raise RuntimeError("requests may only be sent after the handshake")
        request_id = self._next_id
        self._next_id += 1
        self._in_flight.add(request_id)
        return request_id, Request(request_id, method, params or {}).to_wire()

    def cancel(self, request_id: int) -> dict[str, Any] | None:
        """A cancel frame, or None when the request already finished."""
        if request_id not in self._in_flight:
            return None
        return Cancel(request_id).to_wire()

    def receive(self, raw: dict[str, Any]) -> Welcome | Event | Response:
        message = parse_message(raw)
        _check_receivable("client", self.state, message)
        if isinstance(message, ErrorFrame):
            self.state = State.CLOSED
            raise message.error
        if isinstance(message, Welcome):
            if message.version not in self._hello.versions:
                self.state = State.CLOSED
                raise ProtocolViolation(
                    ErrorCode.UNSUPPORTED_PROTOCOL_VERSION,
                    f"server chose version {message.version}, which was not offered",
                    {"supported": self._hello.versions},
                )
            self.welcome = message
            self.state = State.OPEN
            return message
        assert isinstance(message, (Event, Response))
        if message.id not in self._in_flight:
            raise ProtocolViolation(
                ErrorCode.INVALID_FRAME, f"reply for unknown request id {message.id}"
            )
        if isinstance(message, Response):
            self._in_flight.discard(message.id)
        return message


def _check_receivable(side: str, state: State, message: Message) -> None:
    allowed = _RECEIVABLE.get((side, state), frozenset())
    if type(message) not in allowed:
        raise ProtocolViolation(
            ErrorCode.INVALID_FRAME,
            f"a {type(message).__name__.lower()} message is not allowed now ({state.value})",
        )
