"""A nursery that synchronous code may start tasks in, for as long as its owner serves.

The process and terminal tables start tasks from places that cannot await: a launch arms a
lifetime timer, and a reaper callback settles a process whose group outlived its root.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio


class TaskHost:
    def __init__(self) -> None:
        self._nursery: trio.Nursery | None = None

    @property
    def running(self) -> bool:
        """False before `serve` starts and once it has ended (the daemon is stopping)."""
        return self._nursery is not None

    def start_soon(self, function: Callable[..., Awaitable[object]], *args: Any) -> None:
        assert self._nursery is not None, "serve() must be running"
        self._nursery.start_soon(function, *args)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Host tasks until cancelled. Cancellation: cancels every hosted task; `running` is
        False from then on."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
