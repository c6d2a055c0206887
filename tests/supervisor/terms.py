"""Helpers for terminal tests: read a terminal's output until a pattern shows up."""

from __future__ import annotations

import re
from typing import Any

import trio

from supervisor.client import Client

SHELL = ["bash", "--norc", "--noprofile"]
PROMPT_ENV = {"PS1": "$ ", "HISTFILE": "/dev/null"}


class Screen:
    """Follows one terminal's output and accumulates it; waits on patterns, not on time."""

    def __init__(self, client: Client, terminal_id: str) -> None:
        self.client = client
        self.id = terminal_id
        self.data = b""
        self.cursor: str | None = None
        self.events: list[dict[str, Any]] = []

    async def expect(self, pattern: bytes, *, after: int = 0) -> re.Match[bytes]:
        """Read until `pattern` matches output from offset `after` on (10 s at most)."""
        regex = re.compile(pattern)
        with trio.fail_after(10):
            while (match := regex.search(self.data, after)) is None:
                await self._more()
        return match

    async def _more(self) -> None:
        params = {"id": self.id, "since": self.cursor, "follow": True}
        async with self.client.stream("terminal.output", params) as events:
            async for event in events:
                self.events.append(event)
                self.cursor = event["cursor"]
                if event["type"] == "data":
                    self.data += event["data"]
                return
        # Say how it ended: a shell that dies under a test is otherwise a mystery.
        snapshot = await self.client.call("terminal.get", {"id": self.id})
        tail = self.data[-200:]
        raise AssertionError(f"terminal output ended: {snapshot}; last output {tail!r}")

    async def until_end(self) -> None:
        async with self.client.stream(
            "terminal.output", {"id": self.id, "since": self.cursor, "follow": True}
        ) as events:
            async for event in events:
                self.events.append(event)
                self.cursor = event["cursor"]
                if event["type"] == "data":
                    self.data += event["data"]


async def open_shell(client: Client, **params: Any) -> tuple[dict[str, Any], Screen]:
    params.setdefault("argv", SHELL)
    params["env"] = {**PROMPT_ENV, **params.get("env", {})}
    terminal = await client.call("terminal.create", params)
    screen = Screen(client, terminal["id"])
    await screen.expect(rb"\$ ")
    return terminal, screen


async def run(client: Client, screen: Screen, line: str, pattern: bytes) -> re.Match[bytes]:
    """Type a command line and wait for `pattern` in the output that follows it."""
    start = len(screen.data)
    await client.call("terminal.write", {"id": screen.id, "data": line.encode() + b"\r"})
    return await screen.expect(pattern, after=start)
