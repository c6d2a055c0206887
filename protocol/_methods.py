"""Parameter schemas of the daemon's methods: the wire contract for `params`.

Each class is parsed by `protocol.parse`, which names the field of any error; `validate()`
states the rules that types cannot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ._schema import invalid

MAX_SIGNAL = 64


def _positive(value: int | None, name: str, *, zero: bool = False) -> None:
    if value is not None and (value < 0 or (value == 0 and not zero)):
        raise invalid(name, "must be " + ("zero or more" if zero else "positive"))


@dataclass(frozen=True)
class ExecParams:
    argv: list[str]
    cwd: str | None = None
    env: dict[str, str | None] = field(default_factory=dict)
    timeout_ms: int | None = None
    kill_grace_ms: int = 2000
    buffer_bytes: int | None = None
    flow: Literal["drop", "block"] = "drop"

    def validate(self) -> None:
        if not self.argv:
            raise invalid("argv", "must hold at least the program")
        if not self.argv[0]:
            raise invalid("argv[0]", "the program must be non-empty")
        for i, arg in enumerate(self.argv):
            if "\0" in arg:
                raise invalid(f"argv[{i}]", "must not contain NUL")
        if self.cwd is not None and "\0" in self.cwd:
            raise invalid("cwd", "must not contain NUL")
        _positive(self.timeout_ms, "timeout_ms")
        _positive(self.kill_grace_ms, "kill_grace_ms", zero=True)
        _positive(self.buffer_bytes, "buffer_bytes")


@dataclass(frozen=True)
class ProcessId:
    id: str


@dataclass(frozen=True)
class KillParams:
    id: str
    signal: int = 15

    def validate(self) -> None:
        if not 1 <= self.signal <= MAX_SIGNAL:
            raise invalid("signal", f"must be a signal number from 1 to {MAX_SIGNAL}")


@dataclass(frozen=True)
class LogsParams:
    id: str
    since: str | None = None
    replay: bool = True
    follow: bool = False


@dataclass(frozen=True)
class OutputParams:
    id: str
    max_bytes: int | None = None
    timeout_ms: int | None = None

    def validate(self) -> None:
        _positive(self.max_bytes, "max_bytes", zero=True)
        _positive(self.timeout_ms, "timeout_ms", zero=True)


@dataclass(frozen=True)
class WaitExitParams:
    id: str
    timeout_ms: int | None = None

    def validate(self) -> None:
        _positive(self.timeout_ms, "timeout_ms", zero=True)


@dataclass(frozen=True)
class WaitLogParams:
    id: str
    pattern: str
    stream: Literal["stdout", "stderr", "both"] = "both"
    since: str | None = None
    timeout_ms: int | None = None

    def validate(self) -> None:
        _positive(self.timeout_ms, "timeout_ms", zero=True)


@dataclass(frozen=True)
class EnvSetParams:
    vars: dict[str, str | None]


MAX_WINDOW = 65535  # struct winsize holds unsigned shorts


def _window(cols: int, rows: int) -> None:
    if not 1 <= cols <= MAX_WINDOW:
        raise invalid("cols", f"must be from 1 to {MAX_WINDOW}")
    if not 1 <= rows <= MAX_WINDOW:
        raise invalid("rows", f"must be from 1 to {MAX_WINDOW}")


@dataclass(frozen=True)
class TerminalCreateParams:
    argv: list[str]
    cwd: str | None = None
    env: dict[str, str | None] = field(default_factory=dict)
    cols: int = 80
    rows: int = 24
    buffer_bytes: int | None = None

    def validate(self) -> None:
        ExecParams(self.argv, self.cwd, self.env).validate()
        _window(self.cols, self.rows)
        _positive(self.buffer_bytes, "buffer_bytes")


@dataclass(frozen=True)
class TerminalId:
    id: str


@dataclass(frozen=True)
class TerminalTicketParams:
    id: str
    ttl_ms: int = 60_000

    def validate(self) -> None:
        if not 1 <= self.ttl_ms <= 3_600_000:
            raise invalid("ttl_ms", "must be between 1 and 3600000 (an hour)")


@dataclass(frozen=True)
class TerminalWriteParams:
    id: str
    data: bytes


@dataclass(frozen=True)
class TerminalResizeParams:
    id: str
    cols: int
    rows: int

    def validate(self) -> None:
        _window(self.cols, self.rows)


#: `terminal.output` and `terminal.wait_exit` take the same parameters as their process twins.
TerminalOutputParams = LogsParams
TerminalWaitParams = WaitExitParams


@dataclass(frozen=True)
class StatusRange:
    min: int
    max: int


@dataclass(frozen=True, kw_only=True)
class PortWaitParams:
    port: int
    mode: Literal["tcp", "http"] = "tcp"
    path: str = "/"
    status: int | StatusRange = StatusRange(200, 399)
    interval_ms: int = 500
    timeout_ms: int | None = None

    @property
    def status_range(self) -> StatusRange:
        return (
            StatusRange(self.status, self.status) if isinstance(self.status, int) else self.status
        )

    def validate(self) -> None:
        if not 1 <= self.port <= 65535:
            raise invalid("port", "must be from 1 to 65535")
        if not self.path.startswith("/") or any(c in self.path for c in " \r\n\0"):
            raise invalid("path", "must start with / and hold no spaces or line breaks")
        status = self.status_range
        if not 100 <= status.min <= status.max <= 599:
            raise invalid("status", "must be a status from 100 to 599, or a range min <= max")
        if self.interval_ms < 1:
            raise invalid("interval_ms", "must be at least 1")
        _positive(self.timeout_ms, "timeout_ms", zero=True)


@dataclass(frozen=True, kw_only=True)
class ProcessWaitPortParams(PortWaitParams):
    id: str
