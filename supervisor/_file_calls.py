"""Typed helpers for the `file.*` and `watch.*` methods, reached as `client.file`.

`read()` and `write()` hide the chunking: small content travels in one message, big content
as a stream of `data` events (reads) or an upload (writes). `read_chunks()` and
`write_chunks()` move content of any size with memory bounded by one chunk.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import trio

from ._process_calls import _params

if TYPE_CHECKING:
    from .client import Client, EventStream

#: Content above this size is uploaded in chunks of this size.
CHUNK_BYTES = 1024 * 1024


class FileCalls:
    def __init__(self, client: Client) -> None:
        self._client = client

    async def read(self, path: str) -> dict[str, Any]:
        """`{path, size, mime_type, is_text, content: bytes}`, whatever the size."""
        parts: list[bytes] = []
        result: dict[str, Any] = {}
        async for chunk, info in self._chunks(path):
            if chunk:
                parts.append(chunk)
            if info is not None:
                result = info
        return {**result, "content": b"".join(parts)}

    async def read_chunks(self, path: str) -> AsyncIterator[bytes]:
        """The file's bytes in order, one chunk at a time."""
        async for chunk, _ in self._chunks(path):
            if chunk:
                yield chunk

    async def _chunks(self, path: str) -> AsyncIterator[tuple[bytes, dict[str, Any] | None]]:
        async with self._client.stream("file.read", {"path": path}) as events:
            async for event in events:
                yield event["data"], None
            result: dict[str, Any] = events.result
        yield (result.pop("content") or b""), result

    async def write(
        self,
        path: str,
        content: bytes,
        *,
        mode: int | None = None,
        create_parents: bool = False,
    ) -> dict[str, Any]:
        """Write atomically; returns `{path, size}`. Big content goes up in chunks."""
        if len(content) <= CHUNK_BYTES:
            params = _params(path=path, content=content, mode=mode, create_parents=create_parents)
            result: dict[str, Any] = await self._client.call("file.write", params)
            return result
        view = memoryview(content)
        chunks = (bytes(view[i : i + CHUNK_BYTES]) for i in range(0, len(view), CHUNK_BYTES))
        return await self.write_chunks(path, chunks, mode=mode, create_parents=create_parents)

    async def write_chunks(
        self,
        path: str,
        chunks: Iterable[bytes] | AsyncIterable[bytes],
        *,
        mode: int | None = None,
        create_parents: bool = False,
    ) -> dict[str, Any]:
        """Upload chunk by chunk; the file appears, whole, only at the end. If anything
        fails (or this is cancelled) the upload is aborted and nothing is left behind."""
        params = _params(path=path, mode=mode, create_parents=create_parents)
        upload = (await self._client.call("file.upload_begin", params))["upload_id"]
        try:
            offset = 0
            async for chunk in _aiter(chunks):
                await self._client.call(
                    "file.upload_chunk", {"upload_id": upload, "data": chunk, "offset": offset}
                )
                offset += len(chunk)
            result: dict[str, Any] = await self._client.call(
                "file.upload_commit", {"upload_id": upload}
            )
            return result
        except BaseException:
            with contextlib.suppress(Exception), trio.CancelScope(shield=True):
                await self._client.call("file.upload_abort", {"upload_id": upload})
            raise

    async def stat(self, path: str) -> dict[str, Any]:
        result: dict[str, Any] = await self._client.call("file.stat", {"path": path})
        return result

    async def exists(self, path: str) -> bool:
        return bool((await self._client.call("file.exists", {"path": path}))["exists"])

    async def list(
        self, path: str, *, recursive: bool = False, hidden: bool = False, limit: int | None = None
    ) -> dict[str, Any]:
        """`{path, entries: [{name, path, type, size, mode, modified_at}], truncated}`."""
        params = _params(path=path, recursive=recursive, hidden=hidden, limit=limit)
        result: dict[str, Any] = await self._client.call("file.list", params)
        return result

    async def mkdir(
        self, path: str, *, recursive: bool = False, mode: int | None = None
    ) -> dict[str, Any]:
        params = _params(path=path, recursive=recursive, mode=mode)
        result: dict[str, Any] = await self._client.call("file.mkdir", params)
        return result

    async def delete(self, path: str, *, recursive: bool = False) -> dict[str, Any]:
        params = {"path": path, "recursive": recursive}
        result: dict[str, Any] = await self._client.call("file.delete", params)
        return result

    async def move(self, source: str, destination: str, *, overwrite: bool = False) -> Any:
        params = {"source": source, "destination": destination, "overwrite": overwrite}
        return await self._client.call("file.move", params)

    @contextlib.asynccontextmanager
    async def watch(
        self,
        path: str,
        *,
        recursive: bool = True,
        include: Sequence[str] | None = None,
        exclude: Sequence[str] | None = None,
    ) -> AsyncIterator[EventStream]:
        """Events: `watching` first (the kernel watches are active), then `event`,
        `overflow` (rescan), `error`, `stopped`. Leaving the block releases the watches."""
        params = _params(
            path=path,
            recursive=recursive,
            include=None if include is None else list(include),
            exclude=None if exclude is None else list(exclude),
        )
        async with self._client.stream("watch.start", params) as events:
            yield events


async def _aiter(chunks: Iterable[bytes] | AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    if isinstance(chunks, AsyncIterable):
        async for chunk in chunks:
            yield chunk
    else:
        for chunk in chunks:
            yield chunk
