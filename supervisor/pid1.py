"""PID-1 duties: what a container's first process owes everything below it.

The checklist, in the order it runs (the tini and dumb-init duties, plus a clean shutdown):

1. Descriptors the daemon inherited are made close-on-exec, so no child sees them.
2. The descriptor limit is raised to its hard limit: every supervised process holds pipes.
3. Not PID 1? Become a child subreaper, so orphans of supervised work still come to us.
4. Reap every child, ours and adopted, on every SIGCHLD, forever (`reaper.Reaper`).
5. Handle signals explicitly (PID 1 gets no default actions from the kernel):
   `SIGNAL_POLICY` says which stop the daemon and which go to the main command's group.
6. Children start with default signal dispositions, an empty mask (see `spawn`), and an
   `oom_score_adj` above the daemon's, so the kernel's OOM killer takes a workload first.
7. On shutdown: stop accepting work, SIGTERM every supervised tree, SIGKILL after the grace
   (at once on a second SIGTERM or SIGINT), reap everything, exit with the main command's
   code (128+N after signal N), or 0 without one.
"""

from __future__ import annotations

import enum
import logging
import os
import resource
import signal
from collections.abc import Callable

import trio

from .reaper import become_subreaper
from .spawn import mark_inherited_descriptors_cloexec

log = logging.getLogger(__name__)


class Action(enum.Enum):
    STOP = "stop"  # begin shutdown (forwarded to the main command first)
    FORWARD = "forward"  # only forwarded to the main command's process group


SIGNAL_POLICY: dict[signal.Signals, Action] = {
    signal.SIGTERM: Action.STOP,
    signal.SIGINT: Action.STOP,
    signal.SIGQUIT: Action.STOP,
    signal.SIGHUP: Action.FORWARD,
    signal.SIGUSR1: Action.FORWARD,
    signal.SIGUSR2: Action.FORWARD,
    signal.SIGWINCH: Action.FORWARD,
}
#: During shutdown, these skip the grace and go straight to SIGKILL.
HURRY_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})


def prepare() -> None:
    """Checklist items 1 to 3. Call once, before anything is spawned."""
    mark_inherited_descriptors_cloexec()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if os.getpid() == 1:
        log.info("running as PID 1: reaping every orphan in this container")
    elif become_subreaper():
        log.info("not PID 1: became a child subreaper, so orphans are reaped here too")
    else:
        log.warning("could not become a child subreaper; orphans will not be reaped")


class Lifecycle:
    """When to stop, and how urgently."""

    def __init__(self) -> None:
        self.stop_requested = trio.Event()
        self.hurry = trio.Event()
        self.reason = ""

    def request_stop(self, reason: str) -> None:
        if not self.stop_requested.is_set():
            self.reason = reason
            log.info("shutting down: %s", reason)
            self.stop_requested.set()


async def serve_signals(
    lifecycle: Lifecycle,
    forward: Callable[[int], bool],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Checklist item 5, for the daemon's whole life. `forward(signum)` sends a signal to the
    main command's group and says whether there was one to send it to.

    Cancellation: stops handling signals (the process's dispositions are restored).
    """
    with trio.open_signal_receiver(*SIGNAL_POLICY) as signals:
        task_status.started()
        async for signum in signals:
            sig = signal.Signals(signum)
            if lifecycle.stop_requested.is_set() and sig in HURRY_SIGNALS:
                log.info("received %s during shutdown: killing what is left now", sig.name)
                lifecycle.hurry.set()
                continue
            forwarded = forward(signum)
            if SIGNAL_POLICY[sig] is Action.STOP:
                lifecycle.request_stop(f"received {sig.name}")
            elif not forwarded:
                log.info("received %s; no main command to forward it to", sig.name)
