"""Typed helpers for the `process.*` and `env.*` methods, reached as `client.process` and
`client.env`. Results are the wire maps documented in docs/protocol.md."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .client import Client, EventStream


def _params(**values: Any) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


class ProcessCalls:
    def __init__(self, client: Client) -> None:
        self._client = client

    async def exec(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str | None] | None = None,
        timeout_ms: int | None = None,
        kill_grace_ms: int | None = None,
        buffer_bytes: int | None = None,
        flow: Literal["drop", "block"] | None = None,
    ) -> dict[str, Any]:
        """Launch; returns `{id, pid, state: "running", command, cwd, started_at}`."""
        params = _params(
            argv=list(argv),
            cwd=cwd,
            env=None if env is None else dict(env),
            timeout_ms=timeout_ms,
            kill_grace_ms=kill_grace_ms,
            buffer_bytes=buffer_bytes,
            flow=flow,
        )
        result: dict[str, Any] = await self._client.call("process.exec", params)
        return result

    async def get(self, process_id: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = await self._client.call("process.get", {"id": process_id})
        return result

    async def list(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._client.call("process.list")
        return result

    async def kill(self, process_id: str, signal: int = 15) -> dict[str, Any]:
        result: dict[str, Any] = await self._client.call(
            "process.kill", {"id": process_id, "signal": signal}
        )
        return result

    @contextlib.asynccontextmanager
    async def logs(
        self,
        process_id: str,
        *,
        since: str | None = None,
        replay: bool = True,
        follow: bool = False,
    ) -> AsyncIterator[EventStream]:
        """Log events: `stdout`/`stderr` chunks, `truncated`, and the `terminal` event."""
        params = _params(id=process_id, since=since, replay=replay, follow=follow)
        async with self._client.stream("process.logs", params) as events:
            yield events

    async def output(
        self, process_id: str, *, max_bytes: int | None = None, timeout_ms: int | None = None
    ) -> dict[str, Any]:
        result: dict[str, Any] = await self._client.call(
            "process.output", _params(id=process_id, max_bytes=max_bytes, timeout_ms=timeout_ms)
        )
        return result

    async def wait_exit(self, process_id: str, *, timeout_ms: int | None = None) -> dict[str, Any]:
        result: dict[str, Any] = await self._client.call(
            "process.wait_exit", _params(id=process_id, timeout_ms=timeout_ms)
        )
        return result

    async def wait_log(
        self,
        process_id: str,
        pattern: str,
        *,
        stream: Literal["stdout", "stderr", "both"] = "both",
        since: str | None = None,
        timeout_ms: int | None = None,
    ) -> dict[str, Any]:
        params = _params(
            id=process_id, pattern=pattern, stream=stream, since=since, timeout_ms=timeout_ms
        )
        result: dict[str, Any] = await self._client.call("process.wait_log", params)
        return result

    async def wait_port(
        self,
        process_id: str,
        port: int,
        *,
        mode: Literal["tcp", "http"] = "tcp",
        path: str = "/",
        status: int | tuple[int, int] = (200, 399),
        interval_ms: int = 500,
        timeout_ms: int | None = None,
    ) -> dict[str, Any]:
        """Until `port` is ready; PROCESS_EXITED_BEFORE_READY if the process ends first."""
        params = _wait_params(
            port,
            mode=mode,
            path=path,
            status=status,
            interval_ms=interval_ms,
            timeout_ms=timeout_ms,
        )
        result: dict[str, Any] = await self._client.call(
            "process.wait_port", {**params, "id": process_id}
        )
        return result


def _wait_params(
    port: int,
    *,
    mode: Literal["tcp", "http"] = "tcp",
    path: str = "/",
    status: int | tuple[int, int] = (200, 399),
    interval_ms: int = 500,
    timeout_ms: int | None = None,
) -> dict[str, Any]:
    wire_status = status if isinstance(status, int) else {"min": status[0], "max": status[1]}
    return _params(
        port=port,
        mode=mode,
        path=path,
        status=wire_status,
        interval_ms=interval_ms,
        timeout_ms=timeout_ms,
    )


class PortCalls:
    def __init__(self, client: Client) -> None:
        self._client = client

    async def wait(self, port: int, **options: Any) -> dict[str, Any]:
        """Until `port` is ready; options as `ProcessCalls.wait_port`."""
        result: dict[str, Any] = await self._client.call("port.wait", _wait_params(port, **options))
        return result

    async def list(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._client.call("port.list")
        return result

    @contextlib.asynccontextmanager
    async def watch(self) -> AsyncIterator[EventStream]:
        """`listening` / `closed` events, starting with every current listener."""
        async with self._client.stream("port.watch") as events:
            yield events


class EnvCalls:
    def __init__(self, client: Client) -> None:
        self._client = client

    async def set(self, variables: Mapping[str, str | None]) -> dict[str, str | None]:
        """Set (or, with None, remove) sandbox-wide variables for later launches."""
        result = await self._client.call("env.set", {"vars": dict(variables)})
        return dict(result["vars"])

    async def get(self) -> dict[str, str | None]:
        result = await self._client.call("env.get")
        return dict(result["vars"])
