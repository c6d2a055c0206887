"""Which TCP ports are listening, watched cheaply while somebody wants to know.

One poller reads the kernel's listening-socket table (sock_diag) for all subscribers at once:
every 2 ms while a readiness wait is active, every 50 ms while only `port.watch` streams are,
and not at all when nobody asks: an idle daemon does no port polling.
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


class ListenerWatch:
    def __init__(self) -> None:
        self._diag = SockDiag()
        self.snapshot: frozenset[Listener] = frozenset()
        self._fast = 0
        self._slow = 0
        self._wanted = trio.Event()
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
        """Keep the poller running (fast or slow) for the duration of the block."""
        if fast:
            self._fast += 1
        else:
            self._slow += 1
        self._wanted.set()
        try:
            yield
        finally:
            if fast:
                self._fast -= 1
            else:
                self._slow -= 1

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
        """The poller. Sleeps on an event while nobody is subscribed.

        Cancellation: stops polling; closes the netlink socket.
        """
        task_status.started()
        try:
            while True:
                await self._wanted.wait()
                while self._fast or self._slow:
                    self.refresh()
                    await trio.sleep(FAST_INTERVAL if self._fast else SLOW_INTERVAL)
                self._wanted = trio.Event()
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
