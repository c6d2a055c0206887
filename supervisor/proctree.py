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
    state: str  # one letter: R, S, D, Z, ...


def _read_stat(pid: int) -> ProcInfo | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # "pid (comm) S ppid pgrp ...": comm may hold spaces and parentheses.
    fields = raw[raw.rfind(b")") + 2 :].split()
    return ProcInfo(pid, int(fields[2]), fields[0].decode())


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def live_group_members(pgid: int) -> list[int]:
    """Pids in process group `pgid` that have not exited (zombies do not count)."""
    members = []
    for pid in _pids():
        info = _read_stat(pid)
        if info is not None and info.pgid == pgid and info.state not in ("Z", "X"):
            members.append(pid)
    return members


def marked_processes(marker: bytes) -> list[ProcInfo]:
    """Live processes whose initial environment holds `marker` (e.g. b"NAME=value")."""
    needle = b"\0" + marker + b"\0"
    found = []
    own = os.getpid()
    for pid in _pids():
        if pid == own:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = b"\0" + f.read()
        except OSError:
            continue
        if needle in environ or environ.endswith(b"\0" + marker):
            info = _read_stat(pid)
            if info is not None and info.state not in ("Z", "X"):
                found.append(info)
    return found
