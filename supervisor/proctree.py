"""Reading the process tree from /proc: group members, and descendants by launch marker.

Only called when something must be found (a group that outlived its root, a kill, a
timeout, shutdown), never on a timer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    pgid: int
    sid: int
    state: str  # one letter: R, S, D, Z, ...


def _read_stat(pid: int) -> ProcInfo | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # "pid (comm) S ppid pgrp ...": comm may hold spaces and parentheses.
    fields = raw[raw.rfind(b")") + 2 :].split()
    return ProcInfo(pid, int(fields[2]), int(fields[3]), fields[0].decode())


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def live_members(*, pgid: int | None = None, sid: int | None = None) -> list[int]:
    """Pids in process group `pgid` (or session `sid`) that have not exited; zombies, which
    their parents will reap, do not count."""
    members = []
    for pid in _pids():
        info = _read_stat(pid)
        if info is None or info.state in ("Z", "X"):
            continue
        if (pgid is not None and info.pgid == pgid) or (sid is not None and info.sid == sid):
            members.append(pid)
    return members


def _environ_value(pid: int, prefix: bytes) -> bytes | None:
    """The value of the variable `prefix` (b"NAME=") in a process's initial environment."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError:
        return None
    start = 0 if environ.startswith(prefix) else environ.find(b"\0" + prefix) + 1
    if start == 0 and not environ.startswith(prefix):
        return None
    start += len(prefix)
    end = environ.find(b"\0", start)
    return environ[start : len(environ) if end == -1 else end]


def marked_processes(name: str) -> dict[str, list[ProcInfo]]:
    """Live processes (other than this one) by the value of variable `name` in their
    initial environment: one pass over /proc, however many values are wanted."""
    prefix = f"{name}=".encode()
    found: dict[str, list[ProcInfo]] = {}
    own = os.getpid()
    for pid in _pids():
        if pid == own:
            continue
        value = _environ_value(pid, prefix)
        if value is None:
            continue
        info = _read_stat(pid)
        if info is not None and info.state not in ("Z", "X"):
            found.setdefault(value.decode(errors="replace"), []).append(info)
    return found


Marked = dict[str, list[ProcInfo]]
