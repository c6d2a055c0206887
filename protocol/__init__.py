"""The sandbox-supervisor wire contract, sans-IO: bytes in, messages out; messages in, bytes out.

This package imports no trio, socket or os. The daemon (`supervisor`) and any client build on it.
"""

from ._connection import Accepted, ClientConnection, ServerConnection, ServerPolicy, State
from ._errors import CONNECTION_ERRORS, ErrorCode, ProtocolViolation, SupervisorError
from ._framing import (
    DEFAULT_MAX_FRAME,
    HEADER_SIZE,
    FrameDecoder,
    encode_frame,
    pack_message,
    unpack_message,
)
from ._identity import INSTANCE_PATTERN, Cursor, Provenance, ResourceId, provenance
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
from ._methods import (
    EnvSetParams,
    ExecParams,
    KillParams,
    LogsParams,
    OutputParams,
    ProcessId,
    TerminalCreateParams,
    TerminalId,
    TerminalOutputParams,
    TerminalResizeParams,
    TerminalWaitParams,
    TerminalWriteParams,
    WaitExitParams,
    WaitLogParams,
)
from ._schema import invalid, parse

__all__ = [
    "CONNECTION_ERRORS",
    "DEFAULT_MAX_FRAME",
    "HEADER_SIZE",
    "INSTANCE_PATTERN",
    "PROTOCOL_VERSIONS",
    "Accepted",
    "Cancel",
    "ClientConnection",
    "Cursor",
    "EnvSetParams",
    "ErrorCode",
    "ErrorFrame",
    "Event",
    "ExecParams",
    "FrameDecoder",
    "Hello",
    "KillParams",
    "LogsParams",
    "Message",
    "OutputParams",
    "ProcessId",
    "ProtocolViolation",
    "Provenance",
    "Request",
    "ResourceId",
    "Response",
    "ServerConnection",
    "ServerPolicy",
    "State",
    "SupervisorError",
    "TerminalCreateParams",
    "TerminalId",
    "TerminalOutputParams",
    "TerminalResizeParams",
    "TerminalWaitParams",
    "TerminalWriteParams",
    "WaitExitParams",
    "WaitLogParams",
    "Welcome",
    "encode_frame",
    "invalid",
    "pack_message",
    "parse",
    "parse_message",
    "provenance",
    "unpack_message",
]
