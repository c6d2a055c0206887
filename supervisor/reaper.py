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
from collections.abc import Callable
from dataclasses import dataclass

import trio

from . import signalfd

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


def become_subreaper() -> bool:
    """Make orphaned descendants reparent to this process. True on success."""
    libc = ctypes.CDLL(None, use_errno=True)
    result: int = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    return result == 0


ExitCallback = Callable[[ExitStatus], None]


class Reaper:
    def __init__(self) -> None:
        self._watches: dict[int, ExitCallback] = {}
        self.orphans_reaped = 0

    def watch(self, pid: int, on_exit: ExitCallback) -> None:
        """Call `on_exit(status)` once the child `pid` has been reaped. Register it right
        after the spawn, before the next checkpoint, so no exit is missed. The callback runs
        synchronously, in the reaping task: it must not block."""
        self._watches[pid] = on_exit

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
            on_exit = self._watches.pop(pid, None)
            if on_exit is None:
                self.orphans_reaped += 1
                log.debug("reaped orphan %d (status %#x)", pid, status)
                continue
            try:
                on_exit(ExitStatus.from_wait_status(status))
            except Exception:
                # One owner's bug must not stop the reaping of every other child.
                log.exception("exit callback for pid %d failed", pid)
        return count

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Reap on every SIGCHLD, forever. Idle costs nothing: it sleeps on a signalfd.

        SIGCHLD is blocked and read from a signalfd rather than caught: a caught signal
        crosses a Python-level handler, trio's wake-up socket and a second task before
        anyone reaps, on every exit. The mask is set here, before the daemon starts any
        thread, and threads inherit it, so no thread can take the signal and lose it.
        Children start with an empty mask (see `spawn`).

        Cancellation: stops reaping and restores the mask; call `reap_now()` afterwards for a
        last sweep.
        """
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        fd = signalfd.open_signalfd({signal.SIGCHLD})
        try:
            self.reap_now()  # children that exited before the signalfd existed
            task_status.started()
            while True:
                await trio.lowlevel.wait_readable(fd)
                signalfd.drain(fd)
                self.reap_now()
        finally:
            os.close(fd)
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
