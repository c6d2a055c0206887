"""Helpers for process tests: small child programs and daemon-side measurements."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import psutil
import trio

from supervisor.client import Client

PY = sys.executable


def py(code: str) -> list[str]:
    """argv running `code` in a child Python (unbuffered)."""
    return [PY, "-u", "-c", code]


async def collect(client: Client, process_id: str, **options: Any) -> list[dict[str, Any]]:
    """Every log event of a process, following until its terminal event."""
    options.setdefault("follow", True)
    with trio.fail_after(30):
        async with client.process.logs(process_id, **options) as events:
            return [event async for event in events]


def data_of(events: list[dict[str, Any]], stream: str | None = None) -> bytes:
    return b"".join(
        e["data"]
        for e in events
        if e["type"] in ("stdout", "stderr") and stream in (None, e["type"])
    )


async def poll_until(predicate: Callable[[], bool]) -> None:
    """A bounded poll, for facts about other processes that no event announces (another
    process's descriptor count, a pid we do not own). Fails after 10 s."""
    with trio.fail_after(10):
        while not predicate():  # noqa: ASYNC110 - nothing to wait on: another process's state
            await trio.sleep(0.01)


def is_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def wait_gone(pid: int) -> None:
    await poll_until(lambda: is_gone(pid))


def zombie_children(pid: int) -> list[int]:
    return [c.pid for c in psutil.Process(pid).children() if c.status() == psutil.STATUS_ZOMBIE]
