"""Terminals: a program on a PTY, with replayable output, input, resize and Ctrl-C.

A terminal is finished when its root process has exited and its PTY has been drained to
EOF (bounded, as for processes: a background job that keeps the slave open cannot keep a
finished terminal open). Output and cursors work exactly like process logs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from dataclasses import dataclass
from typing import Any

import trio

from protocol import ErrorCode, SupervisorError

from . import proctree
from .epoll_hub import EpollHub
from .outcome import Exit, Outcome
from .processes import signal_marked, wait_all_or_hurry
from .ptys import Pty
from .pumps import Pumps
from .reaper import ExitStatus, Reaper
from .registry import Kind, Registry
from .ringlog import RingLog
from .spawn import MARKER, Launch, spawn, terminal_stdio
from .task_host import TaskHost

log = logging.getLogger(__name__)

Size = tuple[int, int]  # (cols, rows)

TERMINAL = Kind(
    "term",
    "terminal",
    "terminal_id",
    ErrorCode.TERMINAL_NOT_FOUND,
    ErrorCode.STALE_TERMINAL_HANDLE,
)


@dataclass(frozen=True)
class TerminalSettings:
    buffer_bytes: int = 1024 * 1024
    retain_finished: int = 256
    drain_grace: float = 0.1
    drain_limit: int = 1024 * 1024
    read_size: int = 64 * 1024
    #: `terminate`: time between SIGHUP to the session and SIGKILL.
    terminate_grace: float = 2.0


class Terminal(Outcome):
    def __init__(
        self, terminal_id: str, pid: int, launch: Launch, pty: Pty, ring: RingLog, size: Size
    ) -> None:
        super().__init__(ring)
        self.id = terminal_id
        self.pid = pid
        self.launch = launch
        self.pty = pty
        self.cols, self.rows = size
        self._write_lock = trio.Lock()

    def snapshot(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "pid": self.pid,
            "command": self.launch.argv,
            "cwd": self.launch.cwd,
            "cols": self.cols,
            "rows": self.rows,
            "status": self.state,  # terminals say "status" where processes say "state"
            "started_at": self.started_at,
            **self.outcome_fields(),
        }

    # -- control --------------------------------------------------------------------------

    def _control_error(self, operation: str, reason: str) -> SupervisorError:
        return SupervisorError(
            ErrorCode.TERMINAL_CONTROL_ERROR,
            f"cannot {operation} terminal {self.id}: {reason}",
            {"terminal_id": self.id, "operation": operation, "reason": reason},
        )

    def _require_running(self, operation: str) -> None:
        if self.finished.is_set() or self.pty.closed:
            raise self._control_error(operation, "the terminal has finished")

    async def write(self, data: bytes) -> None:
        """Input for the program. Waits while the program does not read (other clients and
        terminals are unaffected); writers are served one at a time, never interleaved.

        Cancellation: part of `data` may have been written.
        """
        self._require_running("write")
        async with self._write_lock:
            try:
                await self.pty.write(data)
            except (trio.ClosedResourceError, OSError) as exc:
                raise self._control_error(
                    "write", getattr(exc, "strerror", None) or "closed"
                ) from None

    def resize(self, cols: int, rows: int) -> None:
        self._require_running("resize")
        try:
            self.pty.resize(cols, rows)
        except OSError as exc:
            raise self._control_error("resize", exc.strerror or str(exc)) from None
        self.cols, self.rows = cols, rows

    def interrupt(self) -> None:
        """Ctrl-C: SIGINT to the terminal's foreground process group (a shell at its prompt
        ignores it; the command it runs in the foreground does not)."""
        self._require_running("interrupt")
        try:
            os.killpg(self.pty.foreground_group(), signal.SIGINT)
        except OSError as exc:
            raise self._control_error("interrupt", exc.strerror or str(exc)) from None

    def signal_session(self, signum: int, marked: proctree.Marked | None = None) -> int:
        """Send `signum` to every process of the terminal's session and to marked escapees."""
        delivered = 0
        for pid in proctree.live_members(sid=self.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)
                delivered += 1
        if marked is None:
            marked = proctree.marked_processes(MARKER)
        return delivered + signal_marked(self.id, signum, marked, skip_sid=self.pid)


class TerminalTable:
    def __init__(
        self, instance: str, reaper: Reaper, hub: EpollHub, settings: TerminalSettings
    ) -> None:
        self.reaper = reaper
        self.hub = hub
        self.settings = settings
        self.registry: Registry[Terminal] = Registry(TERMINAL, instance, settings.retain_finished)
        self._tasks = TaskHost()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the supervising tasks. Cancellation: stops supervising (see `terminate_all`)."""
        await self._tasks.serve(task_status=task_status)

    def create(self, launch: Launch, *, cols: int, rows: int, buffer_bytes: int) -> Terminal:
        """Start `launch` on a new PTY. Raises PROCESS_SPAWN_FAILED with nothing left behind."""
        assert self._tasks.running, "serve() must be running"
        terminal_id = self.registry.next_id()
        launch = Launch(launch.argv, launch.cwd, {**launch.env, MARKER: terminal_id})
        ring = RingLog(buffer_bytes)
        pty = Pty(cols, rows)
        pumps = Pumps(
            self.hub,
            ring,
            [(pty.master, "pty")],
            read_size=self.settings.read_size,
            drain_limit=self.settings.drain_limit,
        )
        try:
            pumps.start()  # before the spawn: once there is a child, nothing may fail
            pid = spawn(launch, terminal_stdio(pty.slave_path))
        except BaseException:
            pumps.stop()
            pty.close()
            raise
        terminal = Terminal(terminal_id, pid, launch, pty, ring, (cols, rows))
        self.reaper.watch(pid, lambda status: self._exited(terminal, pumps, status))
        self.registry.add(terminal_id, terminal)
        log.info("started %s (pid %d): %s", terminal_id, pid, launch.argv)
        return terminal

    def _exited(self, terminal: Terminal, pumps: Pumps, status: ExitStatus) -> None:
        """The shell has been reaped: finish now if the PTY has already ended (no background
        job holds it), else settle in a task."""
        if pumps.pull_now() or not self._tasks.running:
            self._finish(terminal, pumps, status)
        else:
            self._tasks.start_soon(self._settle, terminal, pumps, status)

    async def _settle(self, terminal: Terminal, pumps: Pumps, status: ExitStatus) -> None:
        try:
            await pumps.settle(self.settings.drain_grace)
        except Exception as exc:
            log.exception("settling %s failed", terminal.id)
            pumps.stop()
            terminal.pty.close()
            terminal.fail(ErrorCode.INTERNAL_ERROR, f"supervision failed: {exc}")
            return
        self._finish(terminal, pumps, status)

    def _finish(self, terminal: Terminal, pumps: Pumps, status: ExitStatus) -> None:
        pumps.stop()
        terminal.pty.close()
        terminal.conclude(Exit(status.code, status.signal, False), pumps.error)
        log.info("%s ended: %s", terminal.id, terminal.exit or terminal.error)
        self.registry.retire(terminal.id)

    async def terminate(self, terminal: Terminal) -> None:
        """SIGHUP to the terminal's session (as a hang-up would), SIGKILL after the grace;
        returns once it has finished."""
        terminal._require_running("terminate")
        terminal.signal_session(signal.SIGHUP)
        with trio.move_on_after(self.settings.terminate_grace):
            await terminal.finished.wait()
            return
        terminal.signal_session(signal.SIGKILL)
        await terminal.finished.wait()

    async def terminate_all(self, grace: float, hurry: trio.Event) -> None:
        """Hang up every running terminal, SIGKILL what is left after `grace` (or at once
        when `hurry` is set)."""
        running = [t for t in self.registry if not t.finished.is_set()]
        marked = proctree.marked_processes(MARKER)
        for terminal in running:
            terminal.signal_session(signal.SIGHUP, marked)
        await wait_all_or_hurry([t.finished for t in running], grace, hurry)
        marked = proctree.marked_processes(MARKER)
        for terminal in self.registry:
            if not terminal.finished.is_set():
                terminal.signal_session(signal.SIGKILL, marked)
            else:
                # A finished terminal's session id may belong to someone else by now: only
                # its marked escapees are still known to be its own.
                signal_marked(terminal.id, signal.SIGKILL, marked)
        for terminal in running:
            await terminal.finished.wait()
