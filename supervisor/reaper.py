"""The one place in the daemon that waits for children.

Every exit status is collected here, on SIGCHLD, and routed to whoever registered the pid.
Orphans that reparent to the daemon (it is PID 1 or a child subreaper) are reaped and
dropped. Nothing else may call `waitpid`: a second waiter steals statuses, and a stolen
status reads as exit 0 (`subprocess` and `trio.Process` are never used for supervised
children for this reason).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
from dataclasses import dataclass

import trio

log = logging.getLogger(__name__)

_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class ExitStatus:
    """How a child ended: `code` is 128+N after signal N, as a shell reports it."""

    code: int
    signal: int | None

    @classmethod
    def from_wait_status(cls, status: int) -> ExitStatus:
        if os.WIFSIGNALED(status):
            signum = os.WTERMSIG(status)
            return cls(128 + signum, signum)
        return cls(os.WEXITSTATUS(status), None)


class _Watch:
    def __init__(self) -> None:
        self.done = trio.Event()
        self.status: ExitStatus | None = None


def become_subreaper() -> bool:
    """Make orphaned descendants reparent to this process. True on success."""
    libc = ctypes.CDLL(None, use_errno=True)
    result: int = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    return result == 0


class Reaper:
    def __init__(self) -> None:
        self._watches: dict[int, _Watch] = {}
        self._reaped = trio.Event()
        self.orphans_reaped = 0

    def watch(self, pid: int) -> None:
        """Register a child just spawned, before the next checkpoint, so no exit is missed."""
        self._watches[pid] = _Watch()

    async def wait(self, pid: int) -> ExitStatus:
        """The exit status of a watched child, once it has been reaped.

        Cancellation: only the wait ends; the status is still collected and kept.
        """
        watch = self._watches[pid]
        await watch.done.wait()
        assert watch.status is not None
        self._watches.pop(pid, None)
        return watch.status

    async def wait_for_any_reap(self) -> None:
        """Return after the next batch of children has been reaped."""
        await self._reaped.wait()

    def reap_now(self) -> int:
        """Collect every exited child without blocking; returns how many."""
        count = 0
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            count += 1
            watch = self._watches.get(pid)
            if watch is None:
                self.orphans_reaped += 1
                log.debug("reaped orphan %d (status %#x)", pid, status)
                continue
            watch.status = ExitStatus.from_wait_status(status)
            watch.done.set()
        if count:
            self._reaped.set()
            self._reaped = trio.Event()
        return count

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Reap on every SIGCHLD, forever. Idle costs nothing: it sleeps on the signal.

        Cancellation: stops reaping; call `reap_now()` afterwards for a last sweep.
        """
        with trio.open_signal_receiver(signal.SIGCHLD) as signals:
            self.reap_now()  # children that exited before the receiver was installed
            task_status.started()
            async for _ in signals:
                self.reap_now()
