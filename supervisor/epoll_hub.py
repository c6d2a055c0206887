"""One epoll for the descriptors the daemon watches by the hundred: child output pipes and
PTY masters.

A task per descriptor costs a spawn, a cancel scope and a wake-up per readiness, and an exec
used to pay for two of them (stdout and stderr). Here one task waits on a private epoll
(itself a readable descriptor to trio) and calls each ready descriptor's callback in turn,
synchronously. A callback must not block and must bound its own work (read a budget, then
return): the epoll is level-triggered, so what is left is reported again on the next round,
after trio has run everything else that was waiting.
"""

from __future__ import annotations

import logging
import select
from collections.abc import Callable

import trio

log = logging.getLogger(__name__)

#: Descriptors handled per round at most; the rest are reported again on the next round.
MAX_EVENTS = 256


class EpollHub:
    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._paused: set[int] = set()

    def add(self, fd: int, on_readable: Callable[[], None]) -> None:
        """Call `on_readable()` whenever `fd` is readable (end of file and errors count),
        until `remove(fd)`. Raises once `serve` has ended."""
        self._epoll.register(fd, select.EPOLLIN)
        self._callbacks[fd] = on_readable

    def pause(self, fd: int) -> None:
        """Stop reporting `fd` until `resume(fd)`. (It leaves the epoll: a pipe whose writer
        has gone would otherwise be reported, as a hang-up, whatever the event mask says.)"""
        if fd not in self._paused:
            self._paused.add(fd)
            if not self._epoll.closed:
                self._epoll.unregister(fd)

    def resume(self, fd: int) -> None:
        if fd in self._paused:
            self._paused.discard(fd)
            if not self._epoll.closed:
                self._epoll.register(fd, select.EPOLLIN)

    def remove(self, fd: int) -> None:
        """Forget `fd`. Call it before closing the descriptor."""
        if self._callbacks.pop(fd, None) is None:
            return
        if fd in self._paused:
            self._paused.discard(fd)
        elif not self._epoll.closed:
            self._epoll.unregister(fd)

    def __contains__(self, fd: int) -> bool:
        return fd in self._callbacks

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Dispatch readiness until cancelled. Idle costs nothing: it sleeps on the epoll.

        Cancellation: stops dispatching; the epoll is closed. Descriptors still added belong
        to their owners, who close them; `remove` (and the rest) stay safe to call.
        """
        try:
            task_status.started()
            while True:
                await trio.lowlevel.wait_readable(self._epoll.fileno())
                for fd, _ in self._epoll.poll(0, MAX_EVENTS):
                    callback = self._callbacks.get(fd)
                    if callback is None or fd in self._paused:
                        continue  # removed or paused by an earlier callback this round
                    try:
                        callback()
                    except Exception:
                        # A bug in one owner must not stop every other pipe in the daemon;
                        # dropping the descriptor keeps it from failing again every round.
                        log.exception("callback for descriptor %d failed; dropped", fd)
                        self.remove(fd)
        finally:
            self._epoll.close()
