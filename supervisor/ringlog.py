"""A bounded, cursor-addressed log of output chunks, shared by every reader.

Positions count bytes since the log began, across all streams, and never repeat. Resuming
"after" a position means "from that byte on". The log keeps the newest `capacity` bytes
(each chunk also costs a fixed overhead, so many tiny chunks cannot cheat the bound); older
chunks are dropped whole, and a reader that fell behind learns how many bytes it missed.

Memory is taken as data arrives, never up front.

Flow control: in `block` mode, `offer()` refuses rather than drop bytes that an attached
reader has not taken yet, and `when_room()` says when to offer again; with no reader
attached it behaves like `drop`.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

#: What one chunk costs beyond its bytes (object headers, the deque slot): a child that
#: prints one byte at a time fills the ring by count, not by size.
CHUNK_OVERHEAD = 64


@dataclass(frozen=True)
class Chunk:
    start: int
    stream: str
    data: bytes
    time: float

    @property
    def end(self) -> int:
        return self.start + len(self.data)


@dataclass(frozen=True)
class Run:
    """Consecutive chunks of one stream, their bytes still in parts (see `Reader.extend`)."""

    start: int
    stream: str
    parts: tuple[bytes, ...]
    time: float

    @property
    def end(self) -> int:
        return self.start + sum(map(len, self.parts))


@dataclass(frozen=True)
class Gap:
    """Bytes the reader missed: the log dropped them before it got there."""

    position: int  # where held data resumes
    dropped: int


@dataclass(frozen=True)
class End:
    """The log is closed; `completion` is its terminal event."""

    position: int
    completion: dict[str, Any]


class Reader:
    """Walks a log from a position: chunks, gaps and the end, in order, each exactly once.

    `next()` also acknowledges the previous item, so a `holding` reader (a log follower
    under block flow) keeps the writer from dropping what it has not finished sending.
    """

    def __init__(self, log: RingLog, position: int, *, follow: bool, holding: bool) -> None:
        self._log = log
        self._follow = follow
        self._holding = holding
        self.position = position
        self._next_position = position
        self._done = position >= log.final if log.closed else False

    def __enter__(self) -> Reader:
        if self._holding:
            self._log._readers.add(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._log._readers.discard(self)
        self._log._wake_writers()

    async def next(self) -> Chunk | Gap | End | None:
        """The next item; None when caught up (not following) or after the end.

        Cancellation: nothing is consumed; calling again returns the same item.
        """
        if self.position != self._next_position:
            self.position = self._next_position
            if self._holding:
                self._log._wake_writers()
        log = self._log
        while not self._done:
            if self.position < log.start:
                self._next_position = log.start
                return Gap(log.start, log.start - self.position)
            chunk = log.next_chunk(self.position)
            if chunk is not None:
                self._next_position = chunk.end
                return chunk
            if log.closed:
                assert log.completion is not None
                self._done = True
                self._next_position = log.final
                return End(log.final, log.completion)
            if not self._follow:
                return None
            await log.wait_beyond(self.position)
        await trio.lowlevel.checkpoint()
        return None

    def extend(self, chunk: Chunk, limit: int) -> Run:
        """`chunk` (just returned by `next()`) with the chunks that directly follow it on the
        same stream and are already held, up to `limit` bytes: a follower that fell behind
        catches up in big steps instead of one chunk at a time. The bytes stay in their
        chunks' parts: nothing is copied."""
        parts, size, end = [chunk.data], len(chunk.data), chunk.end
        while size < limit:
            following = self._log.next_chunk(end)
            if following is None or following.start != end or following.stream != chunk.stream:
                break
            if size + len(following.data) > limit:
                break
            parts.append(following.data)
            size += len(following.data)
            end = following.end
        self._next_position = end
        return Run(chunk.start, chunk.stream, tuple(parts), chunk.time)


class RingLog:
    def __init__(self, capacity: int, *, block: bool = False) -> None:
        if capacity < 1:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self.block = block
        self._chunks: collections.deque[Chunk] = collections.deque()
        self._cost = 0
        self.start = 0  # first position still held
        self.end = 0  # next position to be written
        self.dropped = 0
        self.closed = False
        self.completion: dict[str, Any] | None = None
        self._readers: set[Reader] = set()
        self._appended = trio.Event()
        self._room_waiters: list[Callable[[], None]] = []

    # -- writing ------------------------------------------------------------------------

    def offer(self, stream: str, data: bytes) -> bool:
        """Add a chunk, unless the log is in block mode and making room would drop bytes an
        attached reader has not taken yet: then add nothing and return False (see
        `when_room`)."""
        if not data:
            return True
        if self.block:
            lagging = self._bytes_to_free(len(data))
            if lagging and self._would_drop_unread(lagging):
                return False
        self._append_nowait(stream, data)
        return True

    def when_room(self, callback: Callable[[], None]) -> None:
        """Call `callback()` once, the next time a reader moves on or the log stops holding
        writers back: the moment to `offer` again. It runs synchronously, in the task that
        made the progress, so it must not block."""
        self._room_waiters.append(callback)

    @property
    def max_chunk(self) -> int:
        """The largest chunk the ring holds whole: producers should read at most this much."""
        return max(1, self.capacity - CHUNK_OVERHEAD)

    def _bytes_to_free(self, incoming: int) -> int:
        return max(0, self._cost + incoming + CHUNK_OVERHEAD - self.capacity)

    def _would_drop_unread(self, to_free: int) -> bool:
        if not self._readers:
            return False
        slowest = min(reader.position for reader in self._readers)
        freed = 0
        for chunk in self._chunks:
            if freed >= to_free:
                return False
            if chunk.end > slowest:
                return True
            freed += len(chunk.data) + CHUNK_OVERHEAD
        return False

    def _append_nowait(self, stream: str, data: bytes) -> None:
        # One chunk never holds more than the ring: the head of an oversized one is
        # dropped, and still counted in positions, so readers see the gap.
        skip = max(0, len(data) - self.max_chunk)
        chunk = Chunk(self.end + skip, stream, data[skip:], time.time())
        self.dropped += skip
        self._chunks.append(chunk)
        self._cost += len(data) + CHUNK_OVERHEAD
        self.end = chunk.end
        while self._cost > self.capacity and len(self._chunks) > 1:
            old = self._chunks.popleft()
            self._cost -= len(old.data) + CHUNK_OVERHEAD
            self.dropped += len(old.data)
        self.start = self._chunks[0].start
        self._appended.set()
        self._appended = trio.Event()

    def close(self, completion: dict[str, Any]) -> None:
        """No more data; `completion` is the terminal event every reader ends with."""
        self.closed = True
        self.completion = completion
        self._appended.set()

    def _wake_writers(self) -> None:
        waiters, self._room_waiters = self._room_waiters, []
        for callback in waiters:
            callback()

    # -- reading ------------------------------------------------------------------------

    @property
    def final(self) -> int:
        """The terminal event's position once closed (one past the last byte)."""
        return self.end + 1

    def valid_position(self, position: int) -> bool:
        limit = self.final if self.closed else self.end
        return 0 <= position <= limit

    def reader(self, position: int, *, follow: bool = False, holding: bool = False) -> Reader:
        """A reader from `position`; use it as a context manager (`with log.reader(...)`)."""
        return Reader(self, position, follow=follow, holding=holding)

    def release(self) -> None:
        """Stop holding the writer back for readers (the producer is finishing)."""
        self.block = False
        self._wake_writers()

    def next_chunk(self, position: int) -> Chunk | None:
        """The held chunk at `position` (cut when `position` falls inside it), or the first
        one after it, or None when nothing is held from there on.

        Readers ask again after every await: chunks may be dropped in between.
        """
        if position >= self.end:
            return None
        index = self._find(position)
        chunk = self._chunks[index]
        if chunk.start < position:
            return Chunk(position, chunk.stream, chunk.data[position - chunk.start :], chunk.time)
        return chunk

    def _find(self, position: int) -> int:
        # Binary search over chunk starts: readers resume anywhere in a 1 MiB ring cheaply.
        lo, hi = 0, len(self._chunks)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._chunks[mid].end <= position:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def held(self) -> list[Chunk]:
        return list(self._chunks)

    async def wait_beyond(self, position: int) -> None:
        """Return once there is data at or after `position`, or the log is closed."""
        while position >= self.end and not self.closed:
            await self._appended.wait()
