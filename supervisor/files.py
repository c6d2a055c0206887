"""Filesystem operations for the `file.*` methods: blocking, so callers run them in a thread.

Every OSError becomes a SupervisorError with a stable code (`fs_errors`). Writes are atomic:
content goes to a temporary file in the target's directory (same filesystem), which is then
renamed over the target, so a reader sees the old content or the new, never a mix. A crash of
the daemon mid-write can leave a `.NAME.*.supervisor-tmp` file behind, never a torn target.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mimetypes
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from protocol import ErrorCode, SupervisorError, invalid

from .clock import timestamp

_CODES = {
    errno.ENOENT: ErrorCode.FILE_NOT_FOUND,
    errno.EEXIST: ErrorCode.FILE_EXISTS,
    errno.EACCES: ErrorCode.PERMISSION_DENIED,
    errno.EPERM: ErrorCode.PERMISSION_DENIED,
    errno.EISDIR: ErrorCode.IS_A_DIRECTORY,
    errno.ENOTDIR: ErrorCode.NOT_A_DIRECTORY,
    errno.ENOTEMPTY: ErrorCode.DIRECTORY_NOT_EMPTY,
}
TEMP_SUFFIX = ".supervisor-tmp"
NEW_FILE_MODE = 0o644
NEW_DIRECTORY_MODE = 0o755
_SNIFF = 8192


def error_for(exc: OSError, path: str) -> SupervisorError:
    code = _CODES.get(exc.errno or 0, ErrorCode.FILESYSTEM_ERROR)
    name = errno.errorcode.get(exc.errno or 0, "EUNKNOWN")
    reason = exc.strerror or str(exc)
    return SupervisorError(code, f"{path}: {reason}", {"path": path, "errno": name})


@contextlib.contextmanager
def fs_errors(path: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise error_for(exc, getattr(exc, "filename", None) or path) from None


def fail(code: ErrorCode, path: str, message: str) -> SupervisorError:
    return SupervisorError(code, f"{path}: {message}", {"path": path})


def resolve(path: str, workspace: str) -> str:
    """An absolute, normalised path; relative ones are taken from the workspace."""
    return os.path.normpath(os.path.join(workspace, path))


# -- describing --------------------------------------------------------------------------


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def describe(path: str, st: os.stat_result) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": os.path.basename(path) or path,
        "path": path,
        "type": _kind(st.st_mode),
        "size": st.st_size,
        "mode": stat.S_IMODE(st.st_mode),
        "modified_at": timestamp(st.st_mtime),
    }
    if stat.S_ISLNK(st.st_mode):
        with contextlib.suppress(OSError):
            entry["target"] = os.readlink(path)
    return entry


def stat_path(path: str) -> dict[str, Any]:
    with fs_errors(path):
        return describe(path, os.lstat(path))


def exists(path: str) -> dict[str, Any]:
    try:
        st = os.lstat(path)
    except OSError:
        return {"exists": False, "path": path}
    return {"exists": True, "path": path, "type": _kind(st.st_mode)}


def list_directory(path: str, *, recursive: bool, hidden: bool, limit: int) -> dict[str, Any]:
    """Entries sorted by path, depth first; symlinked directories are not followed."""
    with fs_errors(path):
        if not stat.S_ISDIR(os.stat(path).st_mode):
            raise fail(ErrorCode.NOT_A_DIRECTORY, path, "not a directory")
    entries: list[dict[str, Any]] = []
    truncated = False

    def walk(directory: str) -> None:
        nonlocal truncated
        try:
            with os.scandir(directory) as scan:
                children = sorted(scan, key=lambda e: e.name)
        except OSError as exc:
            if directory == path:
                raise error_for(exc, path) from None
            return  # a subdirectory we may not read, or one that just went away
        for child in children:
            if not hidden and child.name.startswith("."):
                continue
            if len(entries) >= limit:
                truncated = True
                return
            try:
                st = child.stat(follow_symlinks=False)
            except OSError:
                continue
            entries.append(describe(child.path, st))
            if recursive and stat.S_ISDIR(st.st_mode):
                walk(child.path)
            if truncated:
                return

    walk(path)
    return {"path": path, "entries": entries, "truncated": truncated}


def sniff(path: str, head: bytes) -> tuple[str, bool]:
    """(MIME type, looks like text) from the name and the first bytes."""
    is_text = _looks_like_text(head)
    guessed, _ = mimetypes.guess_type(path, strict=False)
    if guessed:
        return guessed, is_text
    for magic, mime in _MAGIC:
        if head.startswith(magic):
            return mime, False
    return ("text/plain" if is_text else "application/octet-stream"), is_text


_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF8", "image/gif"),
    (b"%PDF-", "application/pdf"),
    (b"PK\x03\x04", "application/zip"),
    (b"\x1f\x8b", "application/gzip"),
    (b"\x7fELF", "application/x-executable"),
)


def _looks_like_text(head: bytes) -> bool:
    sample = head[:_SNIFF]
    if b"\0" in sample:
        return False
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A character cut by the end of the sample is still text.
        return exc.start >= len(sample) - 3 and exc.reason == "unexpected end of data"
    return True


# -- reading -----------------------------------------------------------------------------


def open_for_reading(path: str) -> int:
    """A descriptor on a regular file (or a /proc-style file); refuses directories, FIFOs
    and devices, which would block or never end."""
    with fs_errors(path):
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise fail(ErrorCode.IS_A_DIRECTORY, path, "is a directory")
        if not stat.S_ISREG(mode):
            raise SupervisorError(
                ErrorCode.FILESYSTEM_ERROR,
                f"{path}: not a regular file",
                {"path": path, "errno": "EINVAL"},
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_chunk(fd: int, size: int, path: str) -> bytes:
    """Up to `size` bytes; fewer only at end of file."""
    parts = []
    with fs_errors(path):
        while size > 0:
            data = os.read(fd, size)
            if not data:
                break
            parts.append(data)
            size -= len(data)
    return b"".join(parts)


# -- writing -----------------------------------------------------------------------------


@dataclass
class PendingWrite:
    """A temporary file beside the target, renamed over it on commit."""

    target: str
    temp: str
    fd: int
    mode: int
    owner: tuple[int, int] | None
    written: int = 0

    def write(self, data: bytes) -> None:
        with fs_errors(self.target):
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view) :]
        self.written += len(data)

    def commit(self) -> None:
        try:
            with fs_errors(self.target):
                os.fchmod(self.fd, self.mode)
                if self.owner is not None:
                    with contextlib.suppress(PermissionError):
                        os.fchown(self.fd, *self.owner)
                os.close(self.fd)
                self.fd = -1
                os.replace(self.temp, self.target)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.temp)


def begin_write(path: str, *, mode: int | None, create_parents: bool) -> PendingWrite:
    """Create the temporary file for an atomic write of `path`. A symlink at `path` is
    written through (the link stays); an existing file keeps its mode and owner unless
    `mode` is given."""
    target = os.path.realpath(path) if os.path.islink(path) else path
    directory, name = os.path.split(target)
    with fs_errors(target):
        if create_parents:
            os.makedirs(directory, NEW_DIRECTORY_MODE, exist_ok=True)
        owner = None
        try:
            st = os.stat(target)
        except FileNotFoundError:
            st = None
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                raise fail(ErrorCode.IS_A_DIRECTORY, target, "is a directory")
            owner = (st.st_uid, st.st_gid) if os.geteuid() == 0 else None
            if mode is None:
                mode = stat.S_IMODE(st.st_mode)
        elif not os.path.isdir(directory):
            raise error_for(FileNotFoundError(errno.ENOENT, "no such directory"), directory)
        fd, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=TEMP_SUFFIX, dir=directory)
    return PendingWrite(target, temp, fd, NEW_FILE_MODE if mode is None else mode, owner)


def write_file(path: str, content: bytes, *, mode: int | None, create_parents: bool) -> int:
    pending = begin_write(path, mode=mode, create_parents=create_parents)
    try:
        pending.write(content)
    except BaseException:
        pending.abort()
        raise
    pending.commit()
    return pending.written


# -- directories, deleting, moving -------------------------------------------------------


def make_directory(path: str, *, recursive: bool, mode: int | None) -> dict[str, Any]:
    mode = NEW_DIRECTORY_MODE if mode is None else mode
    with fs_errors(path):
        if recursive:
            if os.path.lexists(path) and not os.path.isdir(path):
                raise fail(ErrorCode.FILE_EXISTS, path, "exists and is not a directory")
            os.makedirs(path, mode, exist_ok=True)
        else:
            os.mkdir(path, mode)
        return describe(path, os.lstat(path))


def delete(path: str, *, recursive: bool) -> None:
    if path == "/":
        raise invalid("path", "refusing to delete /")
    with fs_errors(path):
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            if not recursive:
                raise fail(ErrorCode.IS_A_DIRECTORY, path, "is a directory (pass recursive)")
            shutil.rmtree(path)
        else:
            os.unlink(path)


_RENAME_NOREPLACE = 1
_AT_FDCWD = -100
_libc = ctypes.CDLL(None, use_errno=True)


def _rename_noreplace(source: str, destination: str) -> None:
    """rename(2) that fails with EEXIST rather than replace: atomic, no check-then-act race."""
    result = _libc.renameat2(
        _AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(destination), _RENAME_NOREPLACE
    )
    if result != 0:
        err = ctypes.get_errno()
        if err in (errno.EINVAL, errno.ENOSYS) and not os.path.lexists(destination):
            os.rename(source, destination)  # a filesystem without RENAME_NOREPLACE
            return
        raise OSError(err, os.strerror(err), destination)


def move(source: str, destination: str, *, overwrite: bool) -> dict[str, Any]:
    """Rename; across filesystems, copy (metadata and symlinks kept) then remove the source."""
    with fs_errors(source):
        os.lstat(source)
    try:
        with fs_errors(destination):
            if overwrite:
                os.rename(source, destination)
            else:
                _rename_noreplace(source, destination)
    except SupervisorError as exc:
        if exc.context.get("errno") != "EXDEV":
            raise
        _move_across(source, destination, overwrite=overwrite)
    return stat_path(destination)


def _move_across(source: str, destination: str, *, overwrite: bool) -> None:
    directory, name = os.path.split(destination)
    staging = os.path.join(directory, f".{name}.{os.getpid()}{TEMP_SUFFIX}")
    with fs_errors(destination):
        if not overwrite and os.path.lexists(destination):
            raise fail(ErrorCode.FILE_EXISTS, destination, "exists (pass overwrite)")
        try:
            if os.path.isdir(source) and not os.path.islink(source):
                shutil.copytree(source, staging, symlinks=True)
            else:
                shutil.copy2(source, staging, follow_symlinks=False)
            if overwrite:
                os.rename(staging, destination)
            else:
                _rename_noreplace(staging, destination)
        except BaseException:
            with contextlib.suppress(OSError):
                if os.path.isdir(staging) and not os.path.islink(staging):
                    shutil.rmtree(staging)
                else:
                    os.unlink(staging)
            raise
    with fs_errors(source):
        if os.path.isdir(source) and not os.path.islink(source):
            shutil.rmtree(source)
        else:
            os.unlink(source)
