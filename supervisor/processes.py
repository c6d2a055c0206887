"""Supervised processes: launch, capture, settle, lifetimes, signals, retention.

A process is `running` from launch until its root has exited *and* its process group is
empty; then the output still buffered in its pipes is drained (bounded: an escaped
descendant that keeps the pipe open cannot hold the process open), and the terminal event
closes its log. The exit reported is the root's.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import signal
from dataclasses import dataclass
from typing import Any

import trio

from protocol import ErrorCode, Provenance, ResourceId, SupervisorError, provenance

from . import proctree
from .clock import timestamp
from .reaper import ExitStatus, Reaper
from .ringlog import RingLog
from .spawn import MARKER, Launch, spawn

log = logging.getLogger(__name__)

KIND = "proc"


@dataclass(frozen=True)
class ProcessSettings:
    workspace: str = "/workspace"
    buffer_bytes: int = 1024 * 1024
    max_buffer_bytes: int = 8 * 1024 * 1024
    retain_finished: int = 256
    #: After the group settles, how long to wait for the pipes to reach EOF on their own.
    drain_grace: float = 0.1
    #: At most this much is read from each pipe after that grace (an escapee may never stop).
    drain_limit: int = 1024 * 1024
    read_size: int = 64 * 1024


@dataclass(frozen=True)
class Exit:
    code: int
    signal: int | None
    timed_out: bool

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.code, "signal": self.signal, "timed_out": self.timed_out}


class Process:
    def __init__(
        self,
        pid: int,
        process_id: str,
        launch: Launch,
        log: RingLog,
        timeout: float | None,
        kill_grace: float,
    ) -> None:
        self.id = process_id
        self.pid = pid
        self.pgid = pid  # setsid made the child the leader of a new session and group
        self.launch = launch
        self.log = log
        self.timeout = timeout
        self.kill_grace = kill_grace
        self.started_at = timestamp()
        self.ended_at: str | None = None
        self.exit: Exit | None = None
        self.error: dict[str, str] | None = None
        self.timed_out = False
        self.group_settled = trio.Event()
        self.finished = trio.Event()
        self._draining = False
        self._idle_waits: set[trio.CancelScope] = set()

    @property
    def state(self) -> str:
        if self.exit is not None:
            return "exited"
        if self.error is not None:
            return "error"
        return "running"

    def snapshot(self) -> dict[str, Any]:
        snap: dict[str, Any] = {
            "id": self.id,
            "pid": self.pid,
            "state": self.state,
            "command": self.launch.argv,
            "cwd": self.launch.cwd,
            "started_at": self.started_at,
        }
        if self.ended_at is not None:
            snap["ended_at"] = self.ended_at
        if self.exit is not None:
            snap["exit"] = self.exit.to_wire()
        if self.error is not None:
            snap["error"] = self.error
        return snap

    # -- signals ------------------------------------------------------------------------

    def signal_tree(
        self, signum: int, marked: dict[str, list[proctree.ProcInfo]] | None = None
    ) -> int:
        """Send `signum` to the process group and to every marked escapee; count deliveries.

        `marked` is a `proctree.marked_processes(MARKER)` result, for callers that signal
        many processes with one scan of /proc.
        """
        delivered = 0
        # Once the group has settled its id may be reused by an unrelated group: never
        # signal it again; only marked escapees remain reachable.
        if not self.group_settled.is_set():
            try:
                os.killpg(self.pgid, signum)
                delivered += 1
            except ProcessLookupError:
                pass
            except PermissionError:
                log.warning("cannot signal group %d of %s", self.pgid, self.id)
        if marked is None:
            marked = proctree.marked_processes(MARKER)
        for info in marked.get(self.id, ()):
            if info.pgid == self.pgid and not self.group_settled.is_set():
                continue  # already reached through the group
            try:
                os.kill(info.pid, signum)
                delivered += 1
            except (ProcessLookupError, PermissionError):
                pass
        return delivered

    # -- output ---------------------------------------------------------------------------

    async def pump(self, fd: int, stream: str, settings: ProcessSettings) -> None:
        """Move everything the child writes on `fd` into the log, whether anyone reads or not.

        Ends at EOF, or, once draining, when the pipe is empty or the drain limit is reached.
        """
        os.set_blocking(fd, False)
        drained = 0
        while True:
            try:
                data = os.read(fd, min(settings.read_size, self.log.max_chunk))
            except BlockingIOError:
                if self._draining:
                    return
                with trio.CancelScope() as idle:
                    self._idle_waits.add(idle)
                    try:
                        await trio.lowlevel.wait_readable(fd)
                    finally:
                        self._idle_waits.discard(idle)
                continue
            if not data:
                return
            if self._draining:
                drained += len(data)
            await self.log.append(stream, data)
            if drained >= settings.drain_limit:
                return

    def start_draining(self) -> None:
        """Pumps read what is buffered now, then stop; the log stops holding the writer."""
        self._draining = True
        self.log.release()
        for idle in list(self._idle_waits):
            idle.cancel()

    def finish(self, status: ExitStatus) -> None:
        self.exit = Exit(status.code, status.signal, self.timed_out)
        self.ended_at = timestamp()
        self.log.close({"type": "terminal", "state": "exited", "exit": self.exit.to_wire()})
        self.finished.set()

    def fail(self, code: str, message: str) -> None:
        self.error = {"code": code, "message": message}
        self.ended_at = timestamp()
        self.log.close({"type": "terminal", "state": "error", "error": self.error})
        self.finished.set()


async def wait_group_empty(pgid: int) -> None:
    """Return once no live process is left in group `pgid`.

    Event-driven: it waits on pidfds of the members it finds (the kernel says when each
    exits), then looks again in case they forked new members.
    """
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            pass  # a member changed user: it exists
        members = proctree.live_group_members(pgid)
        if not members:
            return  # only zombies left, which their parents will reap
        fds = []
        try:
            for pid in members:
                with contextlib.suppress(ProcessLookupError):
                    fds.append(os.pidfd_open(pid))
            async with trio.open_nursery() as nursery:
                for fd in fds:
                    nursery.start_soon(trio.lowlevel.wait_readable, fd)
        finally:
            for fd in fds:
                os.close(fd)


class ProcessTable:
    """Every supervised process of this daemon, running and recently finished."""

    def __init__(self, instance: str, reaper: Reaper, settings: ProcessSettings) -> None:
        self.instance = instance
        self.reaper = reaper
        self.settings = settings
        self._processes: dict[str, Process] = {}
        self._finished: collections.deque[str] = collections.deque()
        self._next_seq = 1
        self._nursery: trio.Nursery | None = None

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the supervising tasks. Cancellation: stops supervising (see `terminate_all`)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    # -- lookups --------------------------------------------------------------------------

    def list(self) -> list[Process]:
        return list(self._processes.values())

    def find(self, process_id: str) -> Process | None:
        """For `process.get`: None for unknown ids and ids of a previous daemon."""
        kind, _ = provenance(process_id, KIND, self.instance)
        return self._processes.get(process_id) if kind is Provenance.OURS else None

    def require(self, process_id: str, operation: str) -> Process:
        kind, _ = provenance(process_id, KIND, self.instance)
        if kind is Provenance.STALE:
            raise SupervisorError(
                ErrorCode.STALE_PROCESS_HANDLE,
                f"process {process_id} belongs to a previous daemon instance",
                {"process_id": process_id, "operation": operation},
            )
        process = self._processes.get(process_id) if kind is Provenance.OURS else None
        if process is None:
            raise SupervisorError(
                ErrorCode.PROCESS_NOT_FOUND,
                f"no process {process_id} in this daemon",
                {"process_id": process_id, "operation": operation},
            )
        return process

    # -- launching ------------------------------------------------------------------------

    def launch(
        self,
        launch: Launch,
        *,
        buffer_bytes: int,
        block: bool,
        timeout: float | None,
        kill_grace: float,
    ) -> Process:
        """Start a child and supervise it. Raises PROCESS_SPAWN_FAILED with nothing left
        behind: no record, no descriptor, no child."""
        assert self._nursery is not None, "serve() must be running"
        process_id = str(ResourceId(KIND, self.instance, self._next_seq))
        env = {**launch.env, MARKER: process_id}
        launch = Launch(launch.argv, launch.cwd, env)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            pid = spawn(launch, out_w, err_w)
        except BaseException:
            for fd in (out_r, err_r):
                os.close(fd)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        self.reaper.watch(pid)
        self._next_seq += 1
        process = Process(
            pid, process_id, launch, RingLog(buffer_bytes, block=block), timeout, kill_grace
        )
        self._processes[process_id] = process
        self._nursery.start_soon(self._supervise, process, out_r, err_r)
        log.info("started %s (pid %d): %s", process_id, pid, launch.argv)
        return process

    async def _supervise(self, process: Process, out_r: int, err_r: int) -> None:
        settings = self.settings
        try:
            async with trio.open_nursery() as nursery:
                pumps_done = trio.Event()

                async def pumps() -> None:
                    async with trio.open_nursery() as inner:
                        inner.start_soon(process.pump, out_r, "stdout", settings)
                        inner.start_soon(process.pump, err_r, "stderr", settings)
                    pumps_done.set()

                nursery.start_soon(pumps)
                if process.timeout is not None:
                    nursery.start_soon(self._enforce_lifetime, process)
                status = await self.reaper.wait(process.pid)
                await wait_group_empty(process.pgid)
                process.group_settled.set()
                with trio.move_on_after(settings.drain_grace):
                    await pumps_done.wait()
                process.start_draining()
                await pumps_done.wait()
                nursery.cancel_scope.cancel()
        except Exception as exc:
            log.exception("supervising %s failed", process.id)
            process.fail(ErrorCode.INTERNAL_ERROR, f"supervision failed: {exc}")
            return
        finally:
            for fd in (out_r, err_r):
                os.close(fd)
        process.finish(status)
        log.info("%s exited: %s", process.id, process.exit)
        self._retire(process)

    async def _enforce_lifetime(self, process: Process) -> None:
        assert process.timeout is not None
        await trio.sleep(process.timeout)
        process.timed_out = True
        log.info("%s reached its lifetime of %g s: SIGTERM", process.id, process.timeout)
        process.signal_tree(signal.SIGTERM)
        with trio.move_on_after(process.kill_grace):
            await process.group_settled.wait()
            return
        log.info("%s still running after %g s: SIGKILL", process.id, process.kill_grace)
        process.signal_tree(signal.SIGKILL)

    def _retire(self, process: Process) -> None:
        self._finished.append(process.id)
        while len(self._finished) > self.settings.retain_finished:
            self._processes.pop(self._finished.popleft(), None)

    # -- shutdown -------------------------------------------------------------------------

    async def terminate_all(self, grace: float) -> None:
        """SIGTERM every running process tree, SIGKILL what is left after `grace`, and wait
        until every one has settled. Escapees of finished processes are killed too: nothing
        supervised outlives the daemon."""
        running = [p for p in self._processes.values() if not p.finished.is_set()]
        marked = proctree.marked_processes(MARKER)
        for process in running:
            process.signal_tree(signal.SIGTERM, marked)
        with trio.move_on_after(grace):
            for process in running:
                await process.group_settled.wait()
        marked = proctree.marked_processes(MARKER)
        for process in self._processes.values():
            if not process.group_settled.is_set() or process.id in marked:
                process.signal_tree(signal.SIGKILL, marked)
        for process in running:
            await process.finished.wait()
