"""`process.wait_port`, `port.wait`, `port.list` and `port.watch`."""

from __future__ import annotations

from typing import Any

import trio

from protocol import (
    ErrorCode,
    PortWaitParams,
    ProcessWaitPortParams,
    SupervisorError,
)

from .clock import timestamp
from .ports import ListenerWatch, connect_address, socket_owners
from .probes import http_status, tcp_accepts
from .processes import Process
from .registry import Registry
from .rpc import Call, Methods, NoParams, wait_deadline
from .sockdiag import Listener

#: How long one HTTP readiness request may take before it counts as "not yet".
HTTP_REQUEST_TIMEOUT = 5.0


def _condition(params: PortWaitParams) -> str:
    if params.mode == "tcp":
        return f"tcp port {params.port} accepts a connection"
    status = params.status_range
    wanted = str(status.min) if status.min == status.max else f"{status.min}-{status.max}"
    return f"http GET {params.path} on port {params.port} answers {wanted}"


async def _probe(params: PortWaitParams, listeners: list[Listener]) -> dict[str, Any] | None:
    """One readiness attempt against whichever of the listeners answers first."""
    status_range = params.status_range
    for host in dict.fromkeys(connect_address(listener) for listener in sorted(listeners)):
        if params.mode == "tcp":
            if await tcp_accepts(host, params.port):
                return {"port": params.port, "mode": "tcp"}
            continue
        status = None
        with trio.move_on_after(HTTP_REQUEST_TIMEOUT):
            status = await http_status(host, params.port, params.path)
        if status is not None and status_range.min <= status <= status_range.max:
            return {"port": params.port, "mode": "http", "status": status}
    return None


async def wait_ready(watch: ListenerWatch, params: PortWaitParams) -> dict[str, Any]:
    """Return once the port is ready. Nothing is sent to it while it does not listen; once it
    does, attempts are `interval_ms` apart.

    Cancellation: ends the wait only.
    """
    started = trio.current_time()
    while True:
        listeners = await watch.wait_listening(params.port)
        result = await _probe(params, listeners)
        if result is not None:
            result["elapsed_ms"] = round((trio.current_time() - started) * 1000, 3)
            return result
        await trio.sleep(params.interval_ms / 1000)


def register(methods: Methods, watch: ListenerWatch, processes: Registry[Process]) -> None:
    def ready_timeout(params: PortWaitParams, process: Process | None) -> SupervisorError:
        context: dict[str, Any] = {"condition": _condition(params), "timeout": params.timeout_ms}
        if process is not None:
            context.update(process_id=process.id, command=process.launch.argv)
        return SupervisorError(
            ErrorCode.PROCESS_READY_TIMEOUT,
            f"not ready after {params.timeout_ms} ms: {context['condition']}",
            context,
        )

    async def process_wait_port(params: ProcessWaitPortParams, call: Call) -> dict[str, Any]:
        process = processes.require(params.id, "wait_port")
        result: dict[str, Any] | None = None
        with wait_deadline(params.timeout_ms, lambda: ready_timeout(params, process)):
            async with trio.open_nursery() as nursery:

                async def until_ready() -> None:
                    nonlocal result
                    result = await wait_ready(watch, params)
                    nursery.cancel_scope.cancel()

                async def until_exit() -> None:
                    await process.finished.wait()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(until_ready)
                nursery.start_soon(until_exit)
        if result is None:
            exit = process.exit
            raise SupervisorError(
                ErrorCode.PROCESS_EXITED_BEFORE_READY,
                f"{process.id} exited before it was ready: {_condition(params)}",
                {
                    "process_id": process.id,
                    "command": process.launch.argv,
                    "condition": _condition(params),
                    "exit_code": None if exit is None else exit.code,
                },
            )
        return result

    async def port_wait(params: PortWaitParams, call: Call) -> dict[str, Any]:
        with wait_deadline(params.timeout_ms, lambda: ready_timeout(params, None)):
            return await wait_ready(watch, params)
        raise AssertionError("unreachable")  # pragma: no cover

    def port_list(params: NoParams) -> list[dict[str, Any]]:
        listeners = sorted(watch.refresh())
        owners = socket_owners({listener.inode for listener in listeners})
        return [_describe(listener, owners.get(listener.inode)) for listener in listeners]

    async def port_watch(params: NoParams, call: Call) -> dict[str, Any]:
        with watch.subscribe(fast=False):
            seen: frozenset[Listener] = frozenset()
            current = watch.refresh()
            while True:
                for listener in sorted(current - seen):
                    await call.send_event({"type": "listening", **_event(listener)})
                for listener in sorted(seen - current):
                    await call.send_event({"type": "closed", **_event(listener)})
                seen = current
                if watch.snapshot == seen:  # a change while we were sending is not missed
                    await watch.wait_change()
                current = watch.snapshot

    methods.add("process.wait_port", ProcessWaitPortParams, process_wait_port)
    methods.add("port.wait", PortWaitParams, port_wait)
    methods.add_sync("port.list", NoParams, port_list)
    methods.add("port.watch", NoParams, port_watch)


def _event(listener: Listener) -> dict[str, Any]:
    return {**listener.to_wire(), "timestamp": timestamp()}


def _describe(listener: Listener, owner: tuple[int, str] | None) -> dict[str, Any]:
    described: dict[str, Any] = {**listener.to_wire(), "owner": None}
    if owner is not None:
        pid, launch_id = owner
        kind = "terminal" if launch_id.startswith("term-") else "process"
        described["owner"] = {"kind": kind, "id": launch_id, "pid": pid}
    return described
