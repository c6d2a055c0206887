"""The error-code table is part of the wire contract: this test pins it."""

from protocol import CONNECTION_ERRORS, ErrorCode, ProtocolViolation, SupervisorError

PINNED = {
    "FRAME_TOO_LARGE",
    "INVALID_FRAME",
    "HANDSHAKE_REQUIRED",
    "HANDSHAKE_TIMEOUT",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "UNAUTHORIZED",
    "ACTIVATION_MISMATCH",
    "REQUEST_ID_IN_USE",
    "METHOD_NOT_FOUND",
    "VALIDATION_FAILED",
    "CANCELLED",
    "SHUTTING_DOWN",
    "TOO_MANY_REQUESTS",
    "INTERNAL_ERROR",
    "PROCESS_NOT_FOUND",
    "STALE_PROCESS_HANDLE",
    "PROCESS_SPAWN_FAILED",
    "INVALID_PROCESS_CWD",
    "INVALID_PROCESS_ENVIRONMENT",
    "INVALID_PROCESS_CURSOR",
    "PROCESS_WAIT_TIMEOUT",
    "PROCESS_EXITED_BEFORE_LOG",
    "PROCESS_READY_TIMEOUT",
    "PROCESS_EXITED_BEFORE_READY",
    "TERMINAL_NOT_FOUND",
    "STALE_TERMINAL_HANDLE",
    "INVALID_TERMINAL_CWD",
    "INVALID_TERMINAL_CURSOR",
    "TERMINAL_CONTROL_ERROR",
    "FILE_NOT_FOUND",
    "FILE_EXISTS",
    "PERMISSION_DENIED",
    "IS_A_DIRECTORY",
    "NOT_A_DIRECTORY",
    "DIRECTORY_NOT_EMPTY",
    "FILESYSTEM_ERROR",
    "UPLOAD_NOT_FOUND",
    "RPC_TRANSPORT_ERROR",
}


def test_error_code_table_is_pinned() -> None:
    """Codes are stable forever: a change here is a protocol change, made on purpose."""
    assert {code.value for code in ErrorCode} == PINNED
    for code in ErrorCode:
        assert code.name == code.value


def test_connection_errors_are_codes() -> None:
    assert set(ErrorCode) >= CONNECTION_ERRORS
    assert ErrorCode.CANCELLED not in CONNECTION_ERRORS


def test_error_to_wire_is_plain_data() -> None:
    err = ProtocolViolation(ErrorCode.UNAUTHORIZED, "no", {"a": 1})
    assert isinstance(err, SupervisorError)
    assert err.to_wire() == {"code": "UNAUTHORIZED", "message": "no", "context": {"a": 1}}
    assert type(err.to_wire()["code"]) is str
    assert "UNAUTHORIZED" in str(err) and "UNAUTHORIZED" in repr(err)


def test_docs_list_every_code() -> None:
    """docs/protocol.md names every code in its table."""
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "protocol.md").read_text()
    missing = [code for code in PINNED if f"`{code}`" not in text]
    assert not missing
