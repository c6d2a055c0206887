"""Supervised processes: launch, capture, settle, lifetimes, signals, retention.

A process is `running` from launch until its root has exited *and* its process group is
empty; then the output still buffered in its pipes is drained (bounded: an escaped
descendant that keeps the pipe open cannot hold the process open), and the terminal event
closes its log. The exit reported is the root's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from dataclasses import dataclass
from typing import Any

import trio

from protocol import ErrorCode

from . import proctree
from .epoll_hub import EpollHub
from .outcome import Exit, Outcome
from .pumps import Pumps
from .reaper import ExitStatus, Reaper
from .registry import Kind, Registry
from .ringlog import RingLog
from .spawn import MARKER, Launch, pipe_stdio, spawn
from .task_host import TaskHost

log = logging.getLogger(__name__)

PROCESS = Kind(
    "proc", "process", "process_id", ErrorCode.PROCESS_NOT_FOUND, ErrorCode.STALE_PROCESS_HANDLE
)
Marked = proctree.Marked


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


def signal_marked(
    resource_id: str, signum: int, marked: Marked, *, skip_pgid: int = -1, skip_sid: int = -1
) -> int:
    """Signal the live processes carrying `resource_id`'s launch marker, except those in
    `skip_pgid` or `skip_sid` (already reached through their group or session). Returns how
    many were signalled."""
    delivered = 0
    for info in marked.get(resource_id, ()):
        if info.pgid == skip_pgid or info.sid == skip_sid:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(info.pid, signum)
            delivered += 1
    return delivered


class Process(Outcome):
    def __init__(
        self,
        pid: int,
        process_id: str,
        launch: Launch,
        ring: RingLog,
        timeout: float | None,
        kill_grace: float,
    ) -> None:
        super().__init__(ring)
        self.id = process_id
        self.pid = pid
        self.pgid = pid  # setsid made the child the leader of a new session and group
        self.launch = launch
        self.timeout = timeout
        self.kill_grace = kill_grace
        self.timed_out = False
        self.group_settled = trio.Event()

    def snapshot(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "pid": self.pid,
            "state": self.state,
            "command": self.launch.argv,
            "cwd": self.launch.cwd,
            "started_at": self.started_at,
            **self.outcome_fields(),
        }

    def signal_tree(self, signum: int, marked: Marked | None = None) -> int:
        """Send `signum` to the process group and to every marked escapee; count deliveries.

        `marked` is a `proctree.marked_processes(MARKER)` result, for callers that signal
        many processes with one scan of /proc.
        """
        delivered = 0
        # Once the group has settled its id may be reused by an unrelated group: never
        # signal it again; only marked escapees remain reachable.
        settled = self.group_settled.is_set()
        if not settled:
            try:
                os.killpg(self.pgid, signum)
                delivered += 1
            except ProcessLookupError:
                pass
            except PermissionError:
                log.warning("cannot signal group %d of %s", self.pgid, self.id)
        if marked is None:
            marked = proctree.marked_processes(MARKER)
        skip = -1 if settled else self.pgid
        return delivered + signal_marked(self.id, signum, marked, skip_pgid=skip)


def group_is_gone(pgid: int) -> bool:
    """True when group `pgid` has no process at all, not even a zombie: the cheap check, one
    system call (`wait_group_empty` does the thorough one)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # a member changed user: it exists
    return False


async def wait_group_empty(pgid: int) -> None:
    """Return once no live process is left in group `pgid`.

    It waits on pidfds of the members it finds (the kernel says when each exits), then looks
    again in case they forked new members. A member can also leave the group without exiting
    (`setsid`, `setpgid`), and no kernel event says so: the wait is therefore also cut short
    every so often (50 ms, doubling up to 1 s) to look again. That look happens only while a
    finished root still has group members.
    """
    recheck = 0.05
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            pass  # a member changed user: it exists
        members = proctree.live_members(pgid=pgid)
        if not members:
            return  # only zombies left, which their parents will reap
        fds = []
        try:
            for pid in members:
                with contextlib.suppress(ProcessLookupError):
                    fds.append(os.pidfd_open(pid))
            with trio.move_on_after(recheck):
                async with trio.open_nursery() as nursery:
                    for fd in fds:
                        nursery.start_soon(trio.lowlevel.wait_readable, fd)
            recheck = min(recheck * 2, 1.0)
        finally:
            for fd in fds:
                os.close(fd)


class ProcessTable:
    """Every supervised process of this daemon, running and recently finished.

    A process has no task of its own while it runs: its pipes are pumps on the hub, and its
    exit comes from the reaper as a callback. The common ending (the group empties with the
    root, and the pipes reach EOF with it) finishes right there; only a group that outlives
    its root, or a pipe held open by someone else, costs a settling task.
    """

    def __init__(
        self, instance: str, reaper: Reaper, hub: EpollHub, settings: ProcessSettings
    ) -> None:
        self.reaper = reaper
        self.hub = hub
        self.settings = settings
        self.registry: Registry[Process] = Registry(PROCESS, instance, settings.retain_finished)
        self._tasks = TaskHost()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the settling and lifetime tasks. Cancellation: stops supervising (see
        `terminate_all`)."""
        await self._tasks.serve(task_status=task_status)

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
        assert self._tasks.running, "serve() must be running"
        process_id = self.registry.next_id()
        launch = Launch(launch.argv, launch.cwd, {**launch.env, MARKER: process_id})
        ring = RingLog(buffer_bytes, block=block)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pumps = Pumps(
            self.hub,
            ring,
            [(out_r, "stdout"), (err_r, "stderr")],
            read_size=self.settings.read_size,
            drain_limit=self.settings.drain_limit,
            grows=True,
        )
        try:
            pumps.start()  # before the spawn: once there is a child, nothing may fail
            pid = spawn(launch, pipe_stdio(out_w, err_w))
        except BaseException:
            pumps.close()
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        process = Process(pid, process_id, launch, ring, timeout, kill_grace)
        self.reaper.watch(pid, lambda status: self._exited(process, pumps, status))
        self.registry.add(process_id, process)
        if timeout is not None:
            self._tasks.start_soon(self._enforce_lifetime, process)
        log.info("started %s (pid %d): %s", process_id, pid, launch.argv)
        return process

    def _exited(self, process: Process, pumps: Pumps, status: ExitStatus) -> None:
        """The root has been reaped: finish now if nothing is left, else settle in a task."""
        if group_is_gone(process.pgid):
            process.group_settled.set()
            if pumps.pull_now():
                self._finish(process, pumps, status)
                return
        if not self._tasks.running:
            self._finish(process, pumps, status)  # the daemon is stopping: take what there is
            return
        self._tasks.start_soon(self._settle, process, pumps, status)

    async def _settle(self, process: Process, pumps: Pumps, status: ExitStatus) -> None:
        try:
            if not process.group_settled.is_set():
                await wait_group_empty(process.pgid)
                process.group_settled.set()
            await pumps.settle(self.settings.drain_grace)
        except Exception as exc:
            log.exception("settling %s failed", process.id)
            pumps.close()
            process.fail(ErrorCode.INTERNAL_ERROR, f"supervision failed: {exc}")
            return
        self._finish(process, pumps, status)

    def _finish(self, process: Process, pumps: Pumps, status: ExitStatus) -> None:
        pumps.close()
        process.group_settled.set()
        process.conclude(Exit(status.code, status.signal, process.timed_out), pumps.error)
        log.info("%s ended: %s", process.id, process.exit or process.error)
        self.registry.retire(process.id)

    async def _enforce_lifetime(self, process: Process) -> None:
        assert process.timeout is not None
        with trio.move_on_after(process.timeout):
            await process.group_settled.wait()
            return
        process.timed_out = True
        log.info("%s reached its lifetime of %g s: SIGTERM", process.id, process.timeout)
        process.signal_tree(signal.SIGTERM)
        with trio.move_on_after(process.kill_grace):
            await process.group_settled.wait()
            return
        log.info("%s still running after %g s: SIGKILL", process.id, process.kill_grace)
        process.signal_tree(signal.SIGKILL)

    async def terminate_all(
        self, grace: float, hurry: trio.Event, *, already_termed: frozenset[str] = frozenset()
    ) -> None:
        """SIGTERM every running process tree (except those in `already_termed`), SIGKILL
        what is left after `grace` or as soon as `hurry` is set, and wait until every one has
        settled. Escapees of finished processes are killed too: nothing supervised outlives
        the daemon."""
        running = [p for p in self.registry if not p.finished.is_set()]
        marked = proctree.marked_processes(MARKER)
        for process in running:
            if process.id not in already_termed:
                process.signal_tree(signal.SIGTERM, marked)
        await wait_all_or_hurry([p.group_settled for p in running], grace, hurry)
        marked = proctree.marked_processes(MARKER)
        for process in self.registry:
            if not process.group_settled.is_set() or process.id in marked:
                process.signal_tree(signal.SIGKILL, marked)
        for process in running:
            await process.finished.wait()


async def wait_all_or_hurry(events: list[trio.Event], grace: float, hurry: trio.Event) -> None:
    """Until every event is set, `grace` seconds pass, or `hurry` is set."""
    with trio.move_on_after(grace):
        async with trio.open_nursery() as nursery:

            async def cut_short() -> None:
                await hurry.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(cut_short)
            for event in events:
                await event.wait()
            nursery.cancel_scope.cancel()
