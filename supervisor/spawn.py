"""Starting a child: argv resolution, its environment, its descriptors and its signals.

A child starts in its own session and process group, with stdin on /dev/null, stdout and
stderr on the pipes given, every signal at its default disposition, an empty signal mask,
and no descriptor but 0, 1 and 2 (everything the daemon opens is close-on-exec, and the
daemon marks what it inherited close-on-exec at start).

`os.posix_spawn` (vfork + exec in glibc) is used rather than fork: it is several times
faster for a large parent and reports exec failures (ENOENT, EACCES, ENOEXEC) synchronously,
so a missing program is a launch error, never a later exit 127. posix_spawn has no chdir
action in Python 3.11, so `spawn()` changes the daemon's own working directory around the
call; the daemon runs its event loop on one thread and never relies on its working directory
(every path it uses is absolute), which makes that safe.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from protocol import ErrorCode, SupervisorError

#: Every launch carries this variable; descendants inherit it, which is how escapees that left
#: the process group (setsid, double fork) are found again. A descendant that scrubs its
#: environment cannot be tracked this way.
MARKER = "SANDBOX_SUPERVISOR_PROCESS"

_DEFAULT_SIGNALS = frozenset(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    cwd: str
    env: dict[str, str]


def check_environment(env: Mapping[str, str | None], code: ErrorCode) -> None:
    """Names non-empty without `=` or NUL; values without NUL."""
    for name, value in env.items():
        reason = None
        if not name:
            reason = "name is empty"
        elif "=" in name:
            reason = "name contains '='"
        elif "\0" in name:
            reason = "name contains NUL"
        elif value is not None and "\0" in value:
            reason = "value contains NUL"
        if reason:
            raise SupervisorError(
                code,
                f"invalid environment variable {name!r}: {reason}",
                {"name": name, "reason": reason},
            )


def build_environment(*layers: Mapping[str, str | None]) -> dict[str, str]:
    """Overlay layers in order; a None value removes the name."""
    env: dict[str, str] = {}
    for layer in layers:
        for name, value in layer.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
    return env


def resolve_cwd(cwd: str | None, workspace: str, code: ErrorCode) -> str:
    path = os.path.normpath(os.path.join(workspace, cwd)) if cwd else workspace
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise SupervisorError(
            code,
            f"working directory {path} is not usable: {exc.strerror}",
            {"cwd": path, "reason": exc.strerror},
        ) from None
    if not stat.S_ISDIR(mode):
        raise SupervisorError(
            code,
            f"working directory {path} is not a directory",
            {"cwd": path, "reason": "not a directory"},
        )
    return path


def _spawn_failed(launch: Launch, reason: str) -> SupervisorError:
    return SupervisorError(
        ErrorCode.PROCESS_SPAWN_FAILED,
        f"cannot start {launch.argv[0]!r}: {reason}",
        {"command": launch.argv, "cwd": launch.cwd, "reason": reason},
    )


def resolve_program(launch: Launch) -> str:
    """The file to execute: argv[0] itself when it has a slash, else a search of the
    launch's own PATH (as execvp does, but with the child's PATH, not the daemon's)."""
    program = launch.argv[0]
    if "/" in program:
        return os.path.join(launch.cwd, program)
    denied = False
    for directory in os.get_exec_path(launch.env):
        candidate = os.path.join(launch.cwd, directory, program)
        if os.path.isfile(candidate):
            if os.access(candidate, os.X_OK):
                return candidate
            denied = True
    raise _spawn_failed(launch, "permission denied" if denied else "not found in PATH")


FileActions = list[tuple[Any, ...]]


def pipe_stdio(stdout: int, stderr: int) -> FileActions:
    """stdin on /dev/null; stdout and stderr on the write ends of two pipes."""
    return [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_DUP2, stdout, 1),
        (os.POSIX_SPAWN_DUP2, stderr, 2),
    ]


def terminal_stdio(tty_path: str) -> FileActions:
    """All three on a PTY slave. The child is a new session leader when it opens the slave
    (setsid runs before file actions), and opening a terminal without O_NOCTTY makes it the
    session's controlling terminal: job control and Ctrl-C work as in a real terminal."""
    return [
        (os.POSIX_SPAWN_OPEN, 0, tty_path, os.O_RDWR, 0),
        (os.POSIX_SPAWN_DUP2, 0, 1),
        (os.POSIX_SPAWN_DUP2, 0, 2),
    ]


def _own_oom_score_adj() -> int | None:
    try:
        with open("/proc/self/oom_score_adj") as f:
            return int(f.read())
    except OSError:
        return None


#: How much more likely than the daemon a child is to be chosen by the OOM killer.
CHILD_OOM_BONUS = 300
_CHILD_OOM = (
    None
    if (own := _own_oom_score_adj()) is None
    else str(min(1000, own + CHILD_OOM_BONUS)).encode()
)


def _raise_oom_score(pid: int) -> None:
    """Best effort: where the kernel refuses, the child keeps the daemon's value. (The child
    runs for microseconds with the daemon's value first: posix_spawn cannot set it before
    exec.)"""
    if _CHILD_OOM is None:
        return
    # os.open rather than open(): a text file object costs four times as much, per exec.
    with contextlib.suppress(OSError):
        fd = os.open(f"/proc/{pid}/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, _CHILD_OOM)
        finally:
            os.close(fd)


def spawn(launch: Launch, stdio: FileActions) -> int:
    """Start the child and return its pid; raise PROCESS_SPAWN_FAILED if exec fails."""
    path = resolve_program(launch)
    home = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.chdir(launch.cwd)
        pid = os.posix_spawn(
            path,
            launch.argv,
            launch.env,
            file_actions=stdio,
            setsid=True,
            setsigmask=(),
            setsigdef=_DEFAULT_SIGNALS,
        )
    except OSError as exc:
        raise _spawn_failed(launch, exc.strerror or str(exc)) from None
    finally:
        os.fchdir(home)
        os.close(home)
    _raise_oom_score(pid)
    return pid


def mark_inherited_descriptors_cloexec() -> None:
    """Descriptors the daemon inherited (beyond 0, 1, 2) must not leak into children."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2:
            # The listdir's own descriptor is in the list, and already closed.
            with contextlib.suppress(OSError):
                os.set_inheritable(fd, False)
