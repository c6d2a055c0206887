"""The `process.*` and `env.*` methods: wire params in, process table calls, wire results out."""

from __future__ import annotations

import collections
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from protocol import (
    Cursor,
    EnvSetParams,
    ErrorCode,
    ExecParams,
    KillParams,
    LogsParams,
    OutputParams,
    ProcessId,
    SupervisorError,
    WaitExitParams,
    WaitLogParams,
    invalid,
)

from .log_events import PROCESS_EVENTS, cursor_position, stream_log
from .processes import Process, ProcessTable
from .ringlog import Chunk, End, Gap
from .rpc import NOT_YET, Call, Methods, NoParams, wait_deadline
from .spawn import Launch, build_environment, check_environment, resolve_cwd

#: The params of a method that waits for a process to finish.
W = TypeVar("W", OutputParams, WaitExitParams)

#: How much recent output per stream `wait_log` keeps to find matches across chunk edges.
MATCH_WINDOW = 64 * 1024


class SandboxEnvironment:
    """The sandbox-wide environment (`setEnvVars`): held in memory only.

    A launch's environment is the daemon's own (minus its secrets), then these values (a
    None value removes the name, even one the container set), then the launch's `env`.
    """

    def __init__(self, base: dict[str, str]) -> None:
        self.base = dict(base)
        self.overlay: dict[str, str | None] = {}

    def for_launch(self, launch_env: dict[str, str | None]) -> dict[str, str]:
        return build_environment(self.base, self.overlay, launch_env)


def _timeout(
    process: Process, operation: str, timeout_ms: int | None
) -> Callable[[], SupervisorError]:
    return lambda: SupervisorError(
        ErrorCode.PROCESS_WAIT_TIMEOUT,
        f"{operation} on {process.id} timed out after {timeout_ms} ms (the process runs on)",
        {"process_id": process.id, "operation": operation, "timeout": timeout_ms},
    )


def _tail(data: bytearray, limit: int | None) -> tuple[bytes, bool]:
    if limit is not None and len(data) > limit:
        return bytes(data[len(data) - limit :]), True
    return bytes(data), False


def _line_around(text: str, start: int, end: int) -> str:
    """The whole line (or lines) the match touches, without the final newline."""
    line_start = text.rfind("\n", 0, start) + 1
    if end > start and text[end - 1] == "\n":
        end -= 1
    line_end = text.find("\n", end)
    return text[line_start : len(text) if line_end == -1 else line_end]


def _printable(text: str) -> str:
    """Undo surrogateescape for the wire: undecodable bytes become U+FFFD."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


class _MatchWindow:
    """The recent output of one stream, searchable as text, with every byte's log position.

    Text is decoded with surrogateescape, which round-trips any bytes, so a match's end
    maps back to an exact log position: the cursor just after the match.
    """

    def __init__(self) -> None:
        self.data = bytearray()
        self._segments: collections.deque[list[int]] = collections.deque()  # [start, length]

    def add(self, chunk: Chunk) -> None:
        self.data += chunk.data
        self._segments.append([chunk.start, len(chunk.data)])
        excess = len(self.data) - MATCH_WINDOW
        if excess > 0:
            del self.data[:excess]
            while excess > 0:
                first = self._segments[0]
                taken = min(excess, first[1])
                first[0] += taken
                first[1] -= taken
                excess -= taken
                if first[1] == 0:
                    self._segments.popleft()

    def clear(self) -> None:
        self.data.clear()
        self._segments.clear()

    def search(self, regex: re.Pattern[str]) -> tuple[re.Match[str], str, int] | None:
        text = self.data.decode("utf-8", "surrogateescape")
        match = regex.search(text)
        if match is None:
            return None
        offset = len(text[: match.end()].encode("utf-8", "surrogateescape"))
        return match, text, self._position_of(offset)

    def _position_of(self, offset: int) -> int:
        for start, length in self._segments:
            if offset <= length:
                return start + offset
            offset -= length
        raise AssertionError("offset beyond the window")  # pragma: no cover


def register(
    methods: Methods,
    table: ProcessTable,
    environment: SandboxEnvironment,
) -> None:
    settings = table.settings
    registry = table.registry

    def once_finished(
        operation: str, answer: Callable[[Process, W], dict[str, Any]]
    ) -> tuple[Callable[[W, Call], Awaitable[dict[str, Any]]], Callable[[W], Any]]:
        """The handlers of a method that answers once the process has finished: one that
        waits (bounded by `timeout_ms`), and one that answers inline when it already has,
        else returns NOT_YET (see `Methods.add`)."""

        async def waiting(params: W, call: Call) -> dict[str, Any]:
            process = registry.require(params.id, operation)
            with wait_deadline(params.timeout_ms, _timeout(process, operation, params.timeout_ms)):
                await process.finished.wait()
            return answer(process, params)

        def at_once(params: W) -> Any:
            process = registry.require(params.id, operation)
            return answer(process, params) if process.finished.is_set() else NOT_YET

        return waiting, at_once

    def exec_(params: ExecParams) -> dict[str, Any]:
        check_environment(params.env, ErrorCode.INVALID_PROCESS_ENVIRONMENT)
        cwd = resolve_cwd(params.cwd, settings.workspace, ErrorCode.INVALID_PROCESS_CWD)
        buffer_bytes = params.buffer_bytes or settings.buffer_bytes
        if buffer_bytes > settings.max_buffer_bytes:
            raise invalid("buffer_bytes", f"must be at most {settings.max_buffer_bytes}")
        launch = Launch(list(params.argv), cwd, environment.for_launch(params.env))
        process = table.launch(
            launch,
            buffer_bytes=buffer_bytes,
            block=params.flow == "block",
            timeout=None if params.timeout_ms is None else params.timeout_ms / 1000,
            kill_grace=params.kill_grace_ms / 1000,
        )
        return process.snapshot()

    def get(params: ProcessId) -> dict[str, Any] | None:
        process = registry.find(params.id)
        return None if process is None else process.snapshot()

    def list_(params: NoParams) -> list[dict[str, Any]]:
        return [process.snapshot() for process in registry]

    def kill(params: KillParams) -> dict[str, Any]:
        process = registry.require(params.id, "kill")
        return {"delivered": process.signal_tree(params.signal)}

    async def logs(params: LogsParams, call: Call) -> dict[str, Any]:
        process = registry.require(params.id, "logs")
        return await stream_log(
            PROCESS_EVENTS,
            process.id,
            process.log,
            since=params.since,
            replay=params.replay,
            follow=params.follow,
            ended_at=lambda: process.ended_at,
            send=call.send_event,
        )

    def output_of(process: Process, params: OutputParams) -> dict[str, Any]:
        streams = {"stdout": bytearray(), "stderr": bytearray()}
        for chunk in process.log.held():
            streams[chunk.stream] += chunk.data
        stdout, cut_out = _tail(streams["stdout"], params.max_bytes)
        stderr, cut_err = _tail(streams["stderr"], params.max_bytes)
        exit = process.exit
        return {
            "stdout": stdout,
            "stderr": stderr,
            "exit_code": None if exit is None else exit.code,
            "signal": None if exit is None else exit.signal,
            "timed_out": process.timed_out,
            "truncated": cut_out or cut_err or process.log.dropped > 0,
        }

    def exit_of(process: Process, params: WaitExitParams) -> dict[str, Any]:
        return process.exit_or_raise()

    async def wait_log(params: WaitLogParams, call: Call) -> dict[str, Any]:
        process = registry.require(params.id, "wait_log")
        try:
            regex = re.compile(params.pattern)
        except re.error as exc:
            raise invalid("pattern", f"not a valid regular expression: {exc}") from None
        wanted = {"stdout", "stderr"} if params.stream == "both" else {params.stream}
        position = 0
        if params.since is not None:
            position = cursor_position(PROCESS_EVENTS, process.id, process.log, params.since)
        windows = {name: _MatchWindow() for name in wanted}
        with (
            wait_deadline(params.timeout_ms, _timeout(process, "wait_log", params.timeout_ms)),
            process.log.reader(position, follow=True) as reader,
        ):
            while (item := await reader.next()) is not None:
                if isinstance(item, Gap):
                    for window in windows.values():
                        window.clear()  # a match must not straddle lost bytes
                elif isinstance(item, Chunk) and item.stream in wanted:
                    window = windows[item.stream]
                    window.add(item)
                    found = window.search(regex)
                    if found is not None:
                        match, text, end = found
                        return {
                            "stream": item.stream,
                            "text": _printable(_line_around(text, match.start(), match.end())),
                            "match": _printable(match.group(0)),
                            "cursor": str(Cursor(process.id, end)),
                        }
                elif isinstance(item, End):
                    exit = None if process.exit is None else process.exit.to_wire()
                    raise SupervisorError(
                        ErrorCode.PROCESS_EXITED_BEFORE_LOG,
                        f"{process.id} exited without output matching {params.pattern!r}",
                        {"process_id": process.id, "pid": process.pid, "exit": exit},
                    )
        raise AssertionError("a following reader ends only at End")  # pragma: no cover

    def env_set(params: EnvSetParams) -> dict[str, Any]:
        check_environment(params.vars, ErrorCode.INVALID_PROCESS_ENVIRONMENT)
        environment.overlay.update(params.vars)
        return {"vars": dict(environment.overlay)}

    def env_get(params: NoParams) -> dict[str, Any]:
        return {"vars": dict(environment.overlay)}

    methods.add_sync("process.exec", ExecParams, exec_)
    methods.add_sync("process.get", ProcessId, get)
    methods.add_sync("process.list", NoParams, list_)
    methods.add_sync("process.kill", KillParams, kill)
    methods.add("process.logs", LogsParams, logs)
    output, output_at_once = once_finished("output", output_of)
    methods.add("process.output", OutputParams, output, at_once=output_at_once)
    wait_exit, wait_exit_at_once = once_finished("wait_exit", exit_of)
    methods.add("process.wait_exit", WaitExitParams, wait_exit, at_once=wait_exit_at_once)
    methods.add("process.wait_log", WaitLogParams, wait_log)
    methods.add_sync("env.set", EnvSetParams, env_set)
    methods.add_sync("env.get", NoParams, env_get)
