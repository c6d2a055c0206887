"""Running one of the daemon's `serve` tasks inside a test."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import trio


@contextlib.asynccontextmanager
async def serving(serve: Callable[..., Awaitable[Any]]) -> AsyncIterator[None]:
    """Start `serve` (a task that reports `task_status.started()`), and cancel it after the
    block."""
    async with trio.open_nursery() as nursery:
        await nursery.start(serve)
        yield
        nursery.cancel_scope.cancel()
