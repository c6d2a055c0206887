"""Recursive filesystem watches on inotify: kernel events in, wire events out.

inotify watches one directory per watch descriptor and says nothing about what happens in
a directory before its watch exists. So when a directory appears (created or moved in), it
is watched and then scanned, and what the scan finds is reported as `create`: a file made
in a new directory before its watch was added is never missed (it may be reported twice).
When the kernel's queue overflows, the client is told to rescan (`overflow`) and the tree
is scanned again for directories that still lack a watch.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from typing import Any

import trio

from protocol import GlobSet

from .clock import timestamp
from .inotify import Inotify, Mask, RawEvent

_EVENTS = Mask.CREATE | Mask.DELETE | Mask.MODIFY | Mask.ATTRIB | Mask.MOVED_FROM | Mask.MOVED_TO
_DIRECTORY_MASK = _EVENTS | Mask.DELETE_SELF | Mask.MOVE_SELF | Mask.ONLYDIR
_FILE_MASK = Mask.MODIFY | Mask.ATTRIB | Mask.DELETE_SELF | Mask.MOVE_SELF
_MAX_SCANNED = 4096
_NAMES = (
    (Mask.CREATE, "create"),
    (Mask.DELETE, "delete"),
    (Mask.MODIFY, "modify"),
    (Mask.ATTRIB, "attrib"),
    (Mask.MOVED_FROM, "move_from"),
    (Mask.MOVED_TO, "move_to"),
)


class Watch:
    """The kernel watches for one `watch.start` stream. Not thread-safe: `start()` may run
    in a worker thread, everything after it in the event loop."""

    def __init__(
        self, root: str, *, recursive: bool, include: GlobSet | None, exclude: GlobSet | None
    ) -> None:
        self.root = root
        self.recursive = recursive
        self.include = include
        self.exclude = exclude
        self.inotify = Inotify()
        self._paths: dict[int, str] = {}  # watch descriptor -> directory (or the root file)
        # Paths a scan reported as created whose own kernel event may still be queued:
        # that event is then not reported a second time.
        self._scanned: set[str] = set()
        self.root_is_directory = True
        self.stopped: str | None = None

    def start(self) -> None:
        """Add the kernel watches (raises OSError if the root cannot be watched)."""
        st = os.stat(self.root)
        if stat.S_ISDIR(st.st_mode):
            self._add_tree(self.root, report=False)
        else:
            self.root_is_directory = False
            self._paths[self.inotify.add_watch(self.root, _FILE_MASK)] = self.root

    def close(self) -> None:
        """Release every kernel watch at once (closing the instance drops them all)."""
        with contextlib.suppress(OSError):
            trio.lowlevel.notify_closing(self.inotify.fd)
        self.inotify.close()

    def translate(self, raw: list[RawEvent]) -> Iterator[dict[str, Any]]:
        """Wire events for a batch of kernel events, new directories scanned in order."""
        for event in raw:
            if event.mask & Mask.Q_OVERFLOW:
                # Directories made while events were lost have no watch yet: add them first,
                # so that what happens after the client hears of the overflow is seen.
                if self.root_is_directory:
                    self._add_tree(self.root, report=False, rescan=True)
                yield {"type": "overflow", "reason": "the kernel's event queue overflowed; rescan"}
                continue
            if event.mask & Mask.IGNORED:
                self._paths.pop(event.wd, None)
                continue
            base = self._paths.get(event.wd)
            if base is None:
                continue
            if event.mask & (Mask.DELETE_SELF | Mask.MOVE_SELF) and base == self.root:
                self.stopped = "the watched path was deleted or moved away"
                return
            path = os.path.join(base, event.name) if event.name else base
            is_directory = bool(event.mask & Mask.ISDIR)
            if is_directory and event.mask & Mask.MOVED_FROM:
                self._forget_tree(path)  # it comes back through MOVED_TO if still inside
            kind = next((name for flag, name in _NAMES if event.mask & flag), None)
            if kind is None or self._excluded(path):
                continue
            # A create the scan already reported, or a path gone again: forget it either way.
            duplicate = kind in ("create", "move_to") and path in self._scanned
            self._scanned.discard(path)
            found: list[dict[str, Any]] = []
            if is_directory and event.mask & (Mask.CREATE | Mask.MOVED_TO) and self.recursive:
                # Watched before it is reported: a client that acts inside a new directory
                # once it has seen it appear misses nothing.
                try:
                    found = self._add_tree(path, report=True)
                except OSError as exc:
                    found = [{"type": "error", "error": f"cannot watch {path}: {exc.strerror}"}]
            if self._included(path) and not duplicate:
                yield _wire(kind, path, is_directory)
            yield from found

    def _relative(self, path: str) -> str:
        return os.path.relpath(path, self.root) if path != self.root else os.path.basename(path)

    def _excluded(self, path: str) -> bool:
        return self.exclude is not None and self.exclude.covers(self._relative(path))

    def _included(self, path: str) -> bool:
        return self.include is None or self.include.matches_name(self._relative(path))

    def _add_tree(
        self, directory: str, *, report: bool, rescan: bool = False
    ) -> list[dict[str, Any]]:
        """Watch `directory` and, when recursive, every directory below it not yet watched;
        with `report`, a `create` event for each entry found (a scan, in name order). A
        `rescan` also walks below directories already watched."""
        found: list[dict[str, Any]] = []
        try:
            wd = self.inotify.add_watch(directory, _DIRECTORY_MASK | Mask.DONT_FOLLOW)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise  # the user's inotify watch limit: the watch would be incomplete
            return found  # gone again already, or not ours to read
        if self._paths.get(wd) == directory and not rescan:
            return found  # already watched, and scanned when it was added
        self._paths[wd] = directory
        if not self.recursive:
            return found
        try:
            with os.scandir(directory) as scan:
                children = sorted(scan, key=lambda e: e.name)
        except OSError:
            return found
        for child in children:
            if self._excluded(child.path):
                continue
            try:
                is_directory = child.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if report:
                if len(self._scanned) >= _MAX_SCANNED:
                    self._scanned.clear()  # bounded: at worst a create is reported twice
                self._scanned.add(child.path)
                if self._included(child.path):
                    found.append(_wire("create", child.path, is_directory))
            if is_directory:
                found += self._add_tree(child.path, report=report, rescan=rescan)
        return found

    def _forget_tree(self, directory: str) -> None:
        prefix = directory + os.sep
        for wd, path in list(self._paths.items()):
            if path == directory or path.startswith(prefix):
                self.inotify.remove_watch(wd)
                del self._paths[wd]


def _wire(kind: str, path: str, is_directory: bool) -> dict[str, Any]:
    return {
        "type": "event",
        "event_type": kind,
        "path": path,
        "is_directory": is_directory,
        "timestamp": timestamp(),
    }
