"""The `terminal.*` methods."""

from __future__ import annotations

from typing import Any

from protocol import (
    ErrorCode,
    SupervisorError,
    TerminalCreateParams,
    TerminalId,
    TerminalOutputParams,
    TerminalResizeParams,
    TerminalTicketParams,
    TerminalWaitParams,
    TerminalWriteParams,
    invalid,
)

from .log_events import TERMINAL_EVENTS, stream_log
from .process_api import SandboxEnvironment
from .rpc import NOT_YET, Call, Methods, NoParams, wait_deadline
from .spawn import Launch, check_environment, resolve_cwd
from .terminals import TerminalTable
from .tickets import Tickets

DEFAULT_TERM = "xterm-256color"


def register(
    methods: Methods,
    table: TerminalTable,
    environment: SandboxEnvironment,
    *,
    workspace: str,
    max_buffer_bytes: int,
    tickets: Tickets,
) -> None:
    registry = table.registry

    def create(params: TerminalCreateParams) -> dict[str, Any]:
        check_environment(params.env, ErrorCode.INVALID_PROCESS_ENVIRONMENT)
        cwd = resolve_cwd(params.cwd, workspace, ErrorCode.INVALID_TERMINAL_CWD)
        buffer_bytes = params.buffer_bytes or table.settings.buffer_bytes
        if buffer_bytes > max_buffer_bytes:
            raise invalid("buffer_bytes", f"must be at most {max_buffer_bytes}")
        env = environment.for_launch({"TERM": DEFAULT_TERM, **params.env})
        terminal = table.create(
            Launch(list(params.argv), cwd, env),
            cols=params.cols,
            rows=params.rows,
            buffer_bytes=buffer_bytes,
        )
        return terminal.snapshot()

    def get(params: TerminalId) -> dict[str, Any] | None:
        terminal = registry.find(params.id)
        return None if terminal is None else terminal.snapshot()

    def list_(params: NoParams) -> list[dict[str, Any]]:
        return [terminal.snapshot() for terminal in registry]

    async def write(params: TerminalWriteParams, call: Call) -> dict[str, Any]:
        terminal = registry.require(params.id, "write")
        await terminal.write(params.data)
        return {"written": len(params.data)}

    def resize(params: TerminalResizeParams) -> dict[str, Any]:
        terminal = registry.require(params.id, "resize")
        terminal.resize(params.cols, params.rows)
        return terminal.snapshot()

    async def output(params: TerminalOutputParams, call: Call) -> dict[str, Any]:
        terminal = registry.require(params.id, "output")
        return await stream_log(
            TERMINAL_EVENTS,
            terminal.id,
            terminal.log,
            since=params.since,
            replay=params.replay,
            follow=params.follow,
            ended_at=lambda: terminal.ended_at,
            send=call.send_event,
        )

    async def wait_exit(params: TerminalWaitParams, call: Call) -> dict[str, Any]:
        terminal = registry.require(params.id, "wait_exit")

        def timed_out() -> SupervisorError:
            return SupervisorError(
                ErrorCode.PROCESS_WAIT_TIMEOUT,
                f"wait_exit on {terminal.id} timed out after {params.timeout_ms} ms "
                "(the terminal runs on)",
                {
                    "terminal_id": terminal.id,
                    "operation": "wait_exit",
                    "timeout": params.timeout_ms,
                },
            )

        with wait_deadline(params.timeout_ms, timed_out):
            await terminal.finished.wait()
        return terminal.exit_or_raise()

    def wait_exit_at_once(params: TerminalWaitParams) -> Any:
        terminal = registry.require(params.id, "wait_exit")
        return terminal.exit_or_raise() if terminal.finished.is_set() else NOT_YET

    def interrupt(params: TerminalId) -> dict[str, Any]:
        registry.require(params.id, "interrupt").interrupt()
        return {}

    async def terminate(params: TerminalId, call: Call) -> dict[str, Any]:
        terminal = registry.require(params.id, "terminate")
        await table.terminate(terminal)
        return terminal.snapshot()

    def ticket(params: TerminalTicketParams) -> dict[str, Any]:
        terminal = registry.require(params.id, "ticket")
        value, expires = tickets.issue(terminal.id, params.ttl_ms / 1000)
        path = f"/terminals/{terminal.id}?ticket={value}"
        return {"ticket": value, "expires_at": expires, "path": path}

    methods.add_sync("terminal.create", TerminalCreateParams, create)
    methods.add_sync("terminal.get", TerminalId, get)
    methods.add_sync("terminal.list", NoParams, list_)
    methods.add("terminal.write", TerminalWriteParams, write)
    methods.add_sync("terminal.resize", TerminalResizeParams, resize)
    methods.add("terminal.output", TerminalOutputParams, output)
    methods.add("terminal.wait_exit", TerminalWaitParams, wait_exit, at_once=wait_exit_at_once)
    methods.add_sync("terminal.interrupt", TerminalId, interrupt)
    methods.add("terminal.terminate", TerminalId, terminate)
    methods.add_sync("terminal.ticket", TerminalTicketParams, ticket)
