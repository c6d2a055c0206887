"""Which TCP ports are listening, watched cheaply while somebody wants to know.

One poller reads the kernel's listening-socket table (sock_diag) for all subscribers at once:
every 2 ms while a readiness wait is young, backing off as it ages (see `wait_interval`),
every 50 ms while only `port.watch` streams are, and not at all when nobody asks: an idle
daemon does no port polling.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import trio

from . import proctree
from .sockdiag import Listener, SockDiag
from .spawn import MARKER

FAST_INTERVAL = 0.002
SLOW_INTERVAL = 0.05
#: A readiness wait that has lasted t seconds is polled every BACKOFF * t, between
#: FAST_INTERVAL and MAX_WAIT_INTERVAL: a server that took a second to listen is noticed at
#: most 2 % of a second late, and a long wait is polled a tenth as often as at 2 ms.
BACKOFF = 0.02
MAX_WAIT_INTERVAL = 0.02


def wait_interval(age: float) -> float:
    """The polling interval for a readiness wait that began `age` seconds ago."""
    return min(MAX_WAIT_INTERVAL, max(FAST_INTERVAL, age * BACKOFF))


class ListenerWatch:
    def __init__(self) -> None:
        self._diag = SockDiag()
        self.snapshot: frozenset[Listener] = frozenset()
        self._waits: list[float] = []  # when each readiness wait began
        self._slow = 0
        self._nudge = trio.Event()
        self._changed = trio.Event()
        self.queries = 0  # reported by runtime.info: an idle daemon must not be polling

    def refresh(self) -> frozenset[Listener]:
        """Read the table now; wake everyone waiting for a change if it changed."""
        current = self._diag.listeners()
        self.queries += 1
        if current != self.snapshot:
            self.snapshot = current
            self._changed.set()
            self._changed = trio.Event()
        return current

    @contextlib.contextmanager
    def subscribe(self, *, fast: bool) -> Iterator[None]:
        """Keep the poller running for the duration of the block: at the pace of a
        readiness wait (`fast`, see `wait_interval`) or of a watch."""
        began = trio.current_time()
        if fast:
            self._waits.append(began)
        else:
            self._slow += 1
        self._nudge.set()  # a sleeping or backed-off poller picks up the new pace now
        try:
            yield
        finally:
            if fast:
                self._waits.remove(began)
            else:
                self._slow -= 1

    def _interval(self) -> float | None:
        """Until the next read: set by the youngest readiness wait; None when nobody asks."""
        if self._waits:
            return wait_interval(trio.current_time() - max(self._waits))
        return SLOW_INTERVAL if self._slow else None

    async def wait_change(self) -> None:
        await self._changed.wait()

    async def wait_listening(self, port: int) -> list[Listener]:
        """The listeners on `port`, as soon as there is one: checked at once, then on each
        change the poller reports (it has just read the table; no second read here)."""
        with self.subscribe(fast=True):
            current = self.refresh()
            while not (found := [entry for entry in current if entry.port == port]):
                await self.wait_change()
                current = self.snapshot
            return found

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The poller. Sleeps on an event while nobody is subscribed; a new subscriber wakes
        it, so a wait that starts beside an old, backed-off one is polled at its own pace.

        Cancellation: stops polling; closes the netlink socket.
        """
        task_status.started()
        try:
            while True:
                self._nudge = trio.Event()
                interval = self._interval()
                if interval is None:
                    await self._nudge.wait()
                    continue
                self.refresh()
                with trio.move_on_after(interval):
                    await self._nudge.wait()
        finally:
            self._diag.close()


def connect_address(listener: Listener) -> str:
    """Where to connect to reach a listener from inside the container."""
    if listener.address == "0.0.0.0":
        return "127.0.0.1"
    if listener.address == "::":
        return "::1"
    return listener.address


def socket_owners(inodes: set[int]) -> dict[int, tuple[int, str]]:
    """Socket inode -> (pid, launch id) for sockets held by supervised processes and their
    descendants (found by launch marker). Sockets of other processes are not attributed."""
    owners: dict[int, tuple[int, str]] = {}
    wanted = {f"socket:[{inode}]": inode for inode in inodes}
    for launch_id, infos in proctree.marked_processes(MARKER).items():
        for info in infos:
            fd_dir = f"/proc/{info.pid}/fd"
            with contextlib.suppress(OSError):
                for name in os.listdir(fd_dir):
                    with contextlib.suppress(OSError):
                        inode = wanted.get(os.readlink(f"{fd_dir}/{name}"))
                        if inode is not None:
                            owners.setdefault(inode, (info.pid, launch_id))
    return owners
