"""Pumps: move what a child writes on a descriptor into a ring log, whoever listens.

A pump runs until end of file. When the child has finished but something else still holds
the other end (an escaped descendant, a background job on a terminal), end of file may never
come: `settle()` waits a short grace for it, then tells the pumps to take only what is
already buffered (bounded) and stop. Exit is not EOF.
"""

from __future__ import annotations

import errno
import os

import trio

from .ringlog import RingLog

#: Bytes a pump moves between two schedule points when its child writes without pause.
YIELD_BYTES = 64 * 1024


class Pumps:
    def __init__(self, log: RingLog, *, read_size: int, drain_limit: int) -> None:
        self.log = log
        self._read_size = min(read_size, log.max_chunk)
        self._drain_limit = drain_limit
        self._draining = False
        self._idle_waits: set[trio.CancelScope] = set()
        self._running = 0
        self._done = trio.Event()

    def start(self, nursery: trio.Nursery, fd: int, stream: str) -> None:
        self._running += 1
        nursery.start_soon(self._run, fd, stream)

    async def _run(self, fd: int, stream: str) -> None:
        try:
            await self._pump(fd, stream)
        finally:
            self._running -= 1
            if self._running == 0:
                self._done.set()

    async def _pump(self, fd: int, stream: str) -> None:
        os.set_blocking(fd, False)
        drained = 0
        unyielded = 0
        while True:
            try:
                data = os.read(fd, self._read_size)
            except BlockingIOError:
                if self._draining:
                    return
                unyielded = 0  # waiting below is a schedule point
                with trio.CancelScope() as idle:
                    self._idle_waits.add(idle)
                    try:
                        await trio.lowlevel.wait_readable(fd)
                    finally:
                        self._idle_waits.discard(idle)
                continue
            except OSError as exc:
                if exc.errno == errno.EIO:
                    return  # a PTY master once the last slave descriptor has closed
                raise
            if not data:
                return
            if self._draining:
                drained += len(data)
            await self.log.append(stream, data, checkpoint=False)
            # A PTY hands over 4 KiB a read: yielding after every one cost a quarter of the
            # throughput. Yield per YIELD_BYTES instead, so a fast child still shares the loop.
            unyielded += len(data)
            if unyielded >= YIELD_BYTES:
                unyielded = 0
                await trio.lowlevel.checkpoint()
            if drained >= self._drain_limit:
                return

    async def settle(self, grace: float) -> None:
        """Return once every pump has stopped: at EOF within `grace`, else after a last,
        bounded drain. The log stops holding the writer back from then on.

        Cancellation: the pumps keep running; call again to finish.
        """
        with trio.move_on_after(grace):
            await self._done.wait()
            return
        self._draining = True
        self.log.release()
        for idle in list(self._idle_waits):
            idle.cancel()
        await self._done.wait()
