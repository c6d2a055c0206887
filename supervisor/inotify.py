"""The kernel's inotify, through ctypes: three system calls and the event record layout.

Written here rather than taken from a package: it is the whole layer (`inotify_simple` is
the same thing plus a blocking `read(timeout)` we would not use), and the daemon waits on the
descriptor with trio itself.
"""

from __future__ import annotations

import ctypes
import enum
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

_libc = ctypes.CDLL(None, use_errno=True)
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len


class Mask(enum.IntFlag):
    ACCESS = 0x1
    MODIFY = 0x2
    ATTRIB = 0x4
    CLOSE_WRITE = 0x8
    CLOSE_NOWRITE = 0x10
    OPEN = 0x20
    MOVED_FROM = 0x40
    MOVED_TO = 0x80
    CREATE = 0x100
    DELETE = 0x200
    DELETE_SELF = 0x400
    MOVE_SELF = 0x800
    UNMOUNT = 0x2000
    Q_OVERFLOW = 0x4000
    IGNORED = 0x8000
    ONLYDIR = 0x1000000
    DONT_FOLLOW = 0x2000000
    EXCL_UNLINK = 0x4000000
    ISDIR = 0x40000000


@dataclass(frozen=True)
class RawEvent:
    wd: int
    mask: Mask
    cookie: int
    name: str


class Inotify:
    """One inotify instance: a non-blocking, close-on-exec descriptor."""

    def __init__(self) -> None:
        fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self.fd: int = fd

    def add_watch(self, path: str, mask: Mask) -> int:
        wd = _libc.inotify_add_watch(self.fd, os.fsencode(path), int(mask))
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), path)
        return int(wd)

    def remove_watch(self, wd: int) -> None:
        _libc.inotify_rm_watch(self.fd, wd)  # fails only for a watch already gone

    def read(self) -> list[RawEvent]:
        """Every event queued now ([] when none): never blocks."""
        try:
            data = os.read(self.fd, 256 * 1024)
        except BlockingIOError:
            return []
        return list(_parse(data))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _parse(data: bytes) -> Iterator[RawEvent]:
    offset = 0
    while offset < len(data):
        wd, mask, cookie, length = _HEADER.unpack_from(data, offset)
        offset += _HEADER.size
        name = data[offset : offset + length].rstrip(b"\0")
        offset += length
        yield RawEvent(wd, Mask(mask), cookie, os.fsdecode(name))
