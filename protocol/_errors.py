"""Stable error codes and the one exception type that carries them.

Codes are strings on the wire and stable forever: add new ones, never rename or remove.
`tests/protocol/test_errors.py` pins this table.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any


class ErrorCode(enum.StrEnum):
    # The peer broke the connection rules: the error is sent as an `error` frame, then the
    # connection closes.
    FRAME_TOO_LARGE = "FRAME_TOO_LARGE"
    INVALID_FRAME = "INVALID_FRAME"
    HANDSHAKE_REQUIRED = "HANDSHAKE_REQUIRED"
    HANDSHAKE_TIMEOUT = "HANDSHAKE_TIMEOUT"
    UNSUPPORTED_PROTOCOL_VERSION = "UNSUPPORTED_PROTOCOL_VERSION"
    UNAUTHORIZED = "UNAUTHORIZED"
    ACTIVATION_MISMATCH = "ACTIVATION_MISMATCH"
    REQUEST_ID_IN_USE = "REQUEST_ID_IN_USE"

    # One request failed; the connection stays open.
    METHOD_NOT_FOUND = "METHOD_NOT_FOUND"
    VALIDATION_FAILED = "VALIDATION_FAILED"
    CANCELLED = "CANCELLED"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    TOO_MANY_REQUESTS = "TOO_MANY_REQUESTS"
    INTERNAL_ERROR = "INTERNAL_ERROR"

    # Processes.
    PROCESS_NOT_FOUND = "PROCESS_NOT_FOUND"
    STALE_PROCESS_HANDLE = "STALE_PROCESS_HANDLE"
    PROCESS_SPAWN_FAILED = "PROCESS_SPAWN_FAILED"
    INVALID_PROCESS_CWD = "INVALID_PROCESS_CWD"
    INVALID_PROCESS_ENVIRONMENT = "INVALID_PROCESS_ENVIRONMENT"
    INVALID_PROCESS_CURSOR = "INVALID_PROCESS_CURSOR"
    PROCESS_WAIT_TIMEOUT = "PROCESS_WAIT_TIMEOUT"
    PROCESS_EXITED_BEFORE_LOG = "PROCESS_EXITED_BEFORE_LOG"
    PROCESS_READY_TIMEOUT = "PROCESS_READY_TIMEOUT"
    PROCESS_EXITED_BEFORE_READY = "PROCESS_EXITED_BEFORE_READY"

    # Terminals.
    TERMINAL_NOT_FOUND = "TERMINAL_NOT_FOUND"
    STALE_TERMINAL_HANDLE = "STALE_TERMINAL_HANDLE"
    INVALID_TERMINAL_CWD = "INVALID_TERMINAL_CWD"
    INVALID_TERMINAL_CURSOR = "INVALID_TERMINAL_CURSOR"
    TERMINAL_CONTROL_ERROR = "TERMINAL_CONTROL_ERROR"

    # Files.
    FILE_NOT_FOUND = "FILE_NOT_FOUND"
    FILE_EXISTS = "FILE_EXISTS"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    IS_A_DIRECTORY = "IS_A_DIRECTORY"
    NOT_A_DIRECTORY = "NOT_A_DIRECTORY"
    DIRECTORY_NOT_EMPTY = "DIRECTORY_NOT_EMPTY"
    FILESYSTEM_ERROR = "FILESYSTEM_ERROR"
    UPLOAD_NOT_FOUND = "UPLOAD_NOT_FOUND"

    # Raised by clients, never sent by the server: the connection itself failed
    # (context.kind: connection_failed, upgrade_failed, peer_closed).
    RPC_TRANSPORT_ERROR = "RPC_TRANSPORT_ERROR"


#: Codes that end the connection: the server sends them in an `error` frame and closes.
CONNECTION_ERRORS: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.FRAME_TOO_LARGE,
        ErrorCode.INVALID_FRAME,
        ErrorCode.HANDSHAKE_REQUIRED,
        ErrorCode.HANDSHAKE_TIMEOUT,
        ErrorCode.UNSUPPORTED_PROTOCOL_VERSION,
        ErrorCode.UNAUTHORIZED,
        ErrorCode.ACTIVATION_MISMATCH,
        ErrorCode.REQUEST_ID_IN_USE,
    }
)


class SupervisorError(Exception):
    """A failure with a stable code, a human message and structured context.

    Deep daemon code raises it; exactly one place in the server turns it into an error reply;
    the client raises it again on its side, so both ends handle the same type.
    """

    def __init__(
        self, code: ErrorCode | str, message: str, context: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = str(code)
        self.message = message
        self.context: dict[str, Any] = dict(context or {})

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r}, {self.context!r})"

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "context": self.context}


class ProtocolViolation(SupervisorError):
    """The peer broke a connection rule. Send `to_wire()` as an error frame, then close."""
