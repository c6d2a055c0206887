"""The `file.*` and `watch.*` methods.

Filesystem calls run in worker threads (`trio.to_thread`): a slow disk or a huge recursive
delete must not stall the event loop. Big content moves in chunks, so daemon memory is
bounded by the chunk size, never the file size:

- `file.read` returns small files inline and streams bigger ones as `data` events;
- big writes are uploads: `file.upload_begin`, `file.upload_chunk` (in order), then
  `file.upload_commit` renames the finished file into place. An upload belongs to its
  connection: abort it, or disconnect, and its temporary file is removed.
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

import trio

from protocol import (
    ErrorCode,
    FileDeleteParams,
    FileListParams,
    FileMkdirParams,
    FileMoveParams,
    FilePath,
    FileReadParams,
    FileWriteParams,
    GlobSet,
    SupervisorError,
    UploadBeginParams,
    UploadChunkParams,
    UploadId,
    WatchStartParams,
    invalid,
)

from . import files
from .rpc import Call, ConnectionScope, Methods
from .watches import Watch

P = ParamSpec("P")
R = TypeVar("R")

#: Unfinished uploads one connection may hold at once.
MAX_UPLOADS_PER_CONNECTION = 16


async def _run(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """`fn` in a worker thread: file system calls must not stall the event loop."""
    return await trio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


@dataclass
class _Upload:
    id: str
    owner: ConnectionScope
    pending: files.PendingWrite
    busy: trio.Lock = field(default_factory=trio.Lock)


class Uploads:
    """Unfinished uploads, each owned by one connection."""

    def __init__(self, instance: str) -> None:
        self._instance = instance
        self._numbers = itertools.count(1)
        self._open: dict[str, _Upload] = {}

    def __len__(self) -> int:
        return len(self._open)

    def add(self, owner: ConnectionScope, pending: files.PendingWrite) -> _Upload:
        upload = _Upload(f"upload-{self._instance}-{next(self._numbers)}", owner, pending)
        self._open[upload.id] = upload
        owner.on_close(lambda: self.abort(upload.id))
        return upload

    def owned(self, owner: ConnectionScope) -> int:
        return sum(1 for upload in self._open.values() if upload.owner is owner)

    def require(self, upload_id: str, owner: ConnectionScope) -> _Upload:
        upload = self._open.get(upload_id)
        if upload is None or upload.owner is not owner:
            raise SupervisorError(
                ErrorCode.UPLOAD_NOT_FOUND,
                f"no unfinished upload {upload_id!r} on this connection",
                {"upload_id": upload_id},
            )
        return upload

    def finish(self, upload_id: str) -> None:
        self._open.pop(upload_id, None)

    def abort(self, upload_id: str) -> None:
        upload = self._open.pop(upload_id, None)
        if upload is not None:
            upload.pending.abort()


def register(methods: Methods, *, workspace: str, instance: str) -> Uploads:
    uploads = Uploads(instance)

    def resolve(path: str) -> str:
        return files.resolve(path, workspace)

    async def read(params: FileReadParams, call: Call) -> dict[str, Any]:
        path = resolve(params.path)
        fd = await _run(files.open_for_reading, path)
        try:
            size = params.chunk_bytes

            async def chunk() -> bytes:  # fewer than `size` bytes only at the end of the file
                return await _run(files.read_chunk, fd, size, path)

            data = await chunk()
            mime_type, is_text = files.sniff(path, data)
            result: dict[str, Any] = {"path": path, "mime_type": mime_type, "is_text": is_text}
            following = await chunk() if len(data) == size else b""
            if not following:
                return {**result, "size": len(data), "content": data, "chunks": 0}
            offset = chunks = 0
            while data:
                await call.send_event({"type": "data", "offset": offset, "data": data})
                offset += len(data)
                chunks += 1
                data, following = following, (await chunk() if len(following) == size else b"")
            return {**result, "size": offset, "content": None, "chunks": chunks}
        finally:
            os.close(fd)

    async def write(params: FileWriteParams, call: Call) -> dict[str, Any]:
        path = resolve(params.path)
        written = await _run(
            files.write_file,
            path,
            params.content,
            mode=params.mode,
            create_parents=params.create_parents,
        )
        return {"path": path, "size": written}

    async def upload_begin(params: UploadBeginParams, call: Call) -> dict[str, Any]:
        if uploads.owned(call.connection) >= MAX_UPLOADS_PER_CONNECTION:
            raise SupervisorError(
                ErrorCode.TOO_MANY_REQUESTS,
                f"at most {MAX_UPLOADS_PER_CONNECTION} unfinished uploads per connection",
                {"max_uploads": MAX_UPLOADS_PER_CONNECTION},
            )
        path = resolve(params.path)
        pending = await _run(
            files.begin_write, path, mode=params.mode, create_parents=params.create_parents
        )
        upload = uploads.add(call.connection, pending)
        return {"upload_id": upload.id, "path": path}

    async def upload_chunk(params: UploadChunkParams, call: Call) -> dict[str, Any]:
        upload = uploads.require(params.upload_id, call.connection)
        async with upload.busy:  # chunks pipelined on one connection land in order
            if params.offset != upload.pending.written:
                raise invalid(
                    "offset", f"expected {upload.pending.written} (the bytes received so far)"
                )
            try:
                await _run(upload.pending.write, params.data)
            except SupervisorError:
                uploads.abort(upload.id)  # disk full, read-only: nothing partial stays
                raise
        return {"upload_id": upload.id, "received": upload.pending.written}

    async def upload_commit(params: UploadId, call: Call) -> dict[str, Any]:
        upload = uploads.require(params.upload_id, call.connection)
        async with upload.busy:
            uploads.finish(upload.id)
            await _run(upload.pending.commit)
        return {"path": upload.pending.target, "size": upload.pending.written}

    async def upload_abort(params: UploadId, call: Call) -> dict[str, Any]:
        upload = uploads.require(params.upload_id, call.connection)
        async with upload.busy:
            uploads.abort(upload.id)
        return {"upload_id": upload.id, "aborted": True}

    async def stat(params: FilePath, call: Call) -> dict[str, Any]:
        return await _run(files.stat_path, resolve(params.path))

    async def exists(params: FilePath, call: Call) -> dict[str, Any]:
        return await _run(files.exists, resolve(params.path))

    async def list_(params: FileListParams, call: Call) -> dict[str, Any]:
        return await _run(
            files.list_directory,
            resolve(params.path),
            recursive=params.recursive,
            hidden=params.hidden,
            limit=params.limit,
        )

    async def mkdir(params: FileMkdirParams, call: Call) -> dict[str, Any]:
        return await _run(
            files.make_directory, resolve(params.path), recursive=params.recursive, mode=params.mode
        )

    async def delete(params: FileDeleteParams, call: Call) -> dict[str, Any]:
        path = resolve(params.path)
        await _run(files.delete, path, recursive=params.recursive)
        return {"path": path, "deleted": True}

    async def move(params: FileMoveParams, call: Call) -> dict[str, Any]:
        return await _run(
            files.move,
            resolve(params.source),
            resolve(params.destination),
            overwrite=params.overwrite,
        )

    watch_numbers = itertools.count(1)

    async def watch_start(params: WatchStartParams, call: Call) -> dict[str, Any]:
        path = resolve(params.path)
        try:
            watch = Watch(
                path,
                recursive=params.recursive,
                include=None if params.include is None else GlobSet(tuple(params.include)),
                exclude=GlobSet(tuple(params.exclusions)) if params.exclusions else None,
            )
        except OSError as exc:  # EMFILE: the user's inotify instance limit
            raise files.error_for(exc, path) from None
        try:
            try:
                await _run(watch.start)
            except FileNotFoundError:
                raise invalid("path", f"{path} does not exist") from None
            except OSError as exc:
                raise files.error_for(exc, path) from None
            watch_id = f"watch-{instance}-{next(watch_numbers)}"
            await call.send_event({"type": "watching", "path": path, "watch_id": watch_id})
            while watch.stopped is None:
                await trio.lowlevel.wait_readable(watch.inotify.fd)
                for event in watch.translate(watch.inotify.read()):
                    await call.send_event(event)
            await call.send_event({"type": "stopped", "reason": watch.stopped})
            return {"watch_id": watch_id, "reason": watch.stopped}
        finally:
            watch.close()

    methods.add("file.read", FileReadParams, read)
    methods.add("file.write", FileWriteParams, write)
    methods.add("file.upload_begin", UploadBeginParams, upload_begin)
    methods.add("file.upload_chunk", UploadChunkParams, upload_chunk)
    methods.add("file.upload_commit", UploadId, upload_commit)
    methods.add("file.upload_abort", UploadId, upload_abort)
    methods.add("file.stat", FilePath, stat)
    methods.add("file.exists", FilePath, exists)
    methods.add("file.list", FileListParams, list_)
    methods.add("file.mkdir", FileMkdirParams, mkdir)
    methods.add("file.delete", FileDeleteParams, delete)
    methods.add("file.move", FileMoveParams, move)
    methods.add("watch.start", WatchStartParams, watch_start)
    return uploads
