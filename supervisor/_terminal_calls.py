"""Typed helpers for the `terminal.*` methods, reached as `client.terminal`."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client import Client, EventStream


class TerminalCalls:
    def __init__(self, client: Client) -> None:
        self._client = client

    async def _call(self, method: str, params: dict[str, Any]) -> Any:
        return await self._client.call(method, params)

    async def create(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str | None] | None = None,
        cols: int = 80,
        rows: int = 24,
        buffer_bytes: int | None = None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"argv": list(argv), "cols": cols, "rows": rows}
        if cwd is not None:
            params["cwd"] = cwd
        if env is not None:
            params["env"] = dict(env)
        if buffer_bytes is not None:
            params["buffer_bytes"] = buffer_bytes
        result: dict[str, Any] = await self._call("terminal.create", params)
        return result

    async def get(self, terminal_id: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = await self._call("terminal.get", {"id": terminal_id})
        return result

    async def list(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await self._call("terminal.list", {})
        return result

    async def write(self, terminal_id: str, data: bytes) -> None:
        await self._call("terminal.write", {"id": terminal_id, "data": data})

    async def resize(self, terminal_id: str, cols: int, rows: int) -> dict[str, Any]:
        params = {"id": terminal_id, "cols": cols, "rows": rows}
        result: dict[str, Any] = await self._call("terminal.resize", params)
        return result

    @contextlib.asynccontextmanager
    async def output(
        self,
        terminal_id: str,
        *,
        since: str | None = None,
        replay: bool = True,
        follow: bool = False,
    ) -> AsyncIterator[EventStream]:
        """Output events: `data`, `truncated`, and the `terminal` event."""
        params: dict[str, Any] = {"id": terminal_id, "replay": replay, "follow": follow}
        if since is not None:
            params["since"] = since
        async with self._client.stream("terminal.output", params) as events:
            yield events

    async def wait_exit(self, terminal_id: str, *, timeout_ms: int | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"id": terminal_id}
        if timeout_ms is not None:
            params["timeout_ms"] = timeout_ms
        result: dict[str, Any] = await self._call("terminal.wait_exit", params)
        return result

    async def interrupt(self, terminal_id: str) -> None:
        await self._call("terminal.interrupt", {"id": terminal_id})

    async def terminate(self, terminal_id: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._call("terminal.terminate", {"id": terminal_id})
        return result
