"""The messages of the wire contract, as frozen dataclasses with `to_wire()`.

Every message is a msgpack map with a `type` key. Parsing is strict about the fields a
message needs and ignores keys it does not know.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._errors import ErrorCode, ProtocolViolation, SupervisorError
from ._schema import parse

PROTOCOL_VERSIONS: tuple[int, ...] = (1,)
MAX_REQUEST_ID = 2**64 - 1


@dataclass(frozen=True)
class Hello:
    versions: list[int]
    client: str
    token: str | None = None
    instance: str | None = None

    def validate(self) -> None:
        if not self.versions:
            raise ProtocolViolation(
                ErrorCode.UNSUPPORTED_PROTOCOL_VERSION,
                "hello offers no protocol versions",
                {"supported": list(PROTOCOL_VERSIONS)},
            )

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"type": "hello", "versions": self.versions, "client": self.client}
        if self.token is not None:
            wire["token"] = self.token
        if self.instance is not None:
            wire["instance"] = self.instance
        return wire


@dataclass(frozen=True)
class Welcome:
    version: int
    instance: str
    server: str
    capabilities: list[str]
    max_frame: int

    def to_wire(self) -> dict[str, Any]:
        return {
            "type": "welcome",
            "version": self.version,
            "instance": self.instance,
            "server": self.server,
            "capabilities": list(self.capabilities),
            "max_frame": self.max_frame,
        }


@dataclass(frozen=True)
class Request:
    id: int
    method: str
    params: Any = field(default_factory=dict)

    def validate(self) -> None:
        _check_id(self.id)

    def to_wire(self) -> dict[str, Any]:
        return {"type": "request", "id": self.id, "method": self.method, "params": self.params}


@dataclass(frozen=True)
class Cancel:
    id: int

    def validate(self) -> None:
        _check_id(self.id)

    def to_wire(self) -> dict[str, Any]:
        return {"type": "cancel", "id": self.id}


@dataclass(frozen=True)
class Event:
    id: int
    event: dict[str, Any]

    def to_wire(self) -> dict[str, Any]:
        return {"type": "event", "id": self.id, "event": self.event}


@dataclass(frozen=True)
class Response:
    """A final reply: `error` set means the request failed, else `result` holds the answer."""

    id: int
    result: Any = None
    error: SupervisorError | None = None

    def to_wire(self) -> dict[str, Any]:
        if self.error is not None:
            return {"type": "response", "id": self.id, "error": self.error.to_wire()}
        return {"type": "response", "id": self.id, "result": self.result}


@dataclass(frozen=True)
class ErrorInfo:
    code: str
    message: str
    context: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _WireResponse:
    id: int
    result: Any = None
    error: ErrorInfo | None = None


@dataclass(frozen=True)
class ErrorFrame:
    """An `error` frame: the connection-level failure the server sends just before closing."""

    error: SupervisorError

    def to_wire(self) -> dict[str, Any]:
        return {"type": "error", **self.error.to_wire()}


Message = Hello | Welcome | Request | Cancel | Event | Response | ErrorFrame


def _check_id(value: int) -> None:
    if not 0 <= value <= MAX_REQUEST_ID:
        raise SupervisorError(
            ErrorCode.VALIDATION_FAILED, "id: must be an unsigned 64-bit integer", {"field": "id"}
        )


def _parse_as_frame(cls: type[Any], raw: dict[str, Any]) -> Any:
    """Schema failures inside a frame's envelope are INVALID_FRAME: the peer broke the rules."""
    try:
        return parse(cls, raw, where=raw.get("type", "frame"))
    except ProtocolViolation:
        raise
    except SupervisorError as exc:
        raise ProtocolViolation(ErrorCode.INVALID_FRAME, exc.message, exc.context) from None


def parse_message(raw: dict[str, Any]) -> Message:
    """Turn a decoded wire map into a message; unknown or malformed ones are INVALID_FRAME."""
    kind = raw.get("type")
    if kind == "hello":
        return _parse_as_frame(Hello, raw)  # type: ignore[no-any-return]
    if kind == "welcome":
        return _parse_as_frame(Welcome, raw)  # type: ignore[no-any-return]
    if kind == "request":
        return _parse_as_frame(Request, raw)  # type: ignore[no-any-return]
    if kind == "cancel":
        return _parse_as_frame(Cancel, raw)  # type: ignore[no-any-return]
    if kind == "event":
        return _parse_as_frame(Event, raw)  # type: ignore[no-any-return]
    if kind == "response":
        wire: _WireResponse = _parse_as_frame(_WireResponse, raw)
        if wire.error is None:
            return Response(wire.id, wire.result)
        info = wire.error
        return Response(wire.id, error=SupervisorError(info.code, info.message, info.context))
    if kind == "error":
        info = _parse_as_frame(ErrorInfo, raw)
        return ErrorFrame(SupervisorError(info.code, info.message, info.context))
    raise ProtocolViolation(
        ErrorCode.INVALID_FRAME, f"unknown message type {kind!r}", {"type": repr(kind)}
    )
