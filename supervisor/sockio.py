"""Bytes in and out of a connected socket, without a task hop per message.

trio's `SocketStream.send_all` is not safe to cancel halfway (a cancelled send leaves a cut
frame on the wire), so a connection used to need a writer task that every reply went through:
two task switches per message. `SocketIO` writes synchronously instead: a message goes
straight into the kernel when nothing is queued before it, and whatever the kernel does not
take waits in a bounded backlog that one flusher task writes out as the socket drains. A
message is queued whole or not at all, so cancelling a sender never cuts one.

It works on its own duplicate of the stream's descriptor, so that it can pass
`MSG_NOSIGNAL` (a peer that hung up is an error, never a SIGPIPE) with public APIs only.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
import socket
from collections.abc import Callable
from typing import TypeVar

import trio

A = TypeVar("A")
R = TypeVar("R")

#: Bytes queued per connection before senders wait for the peer to read.
DEFAULT_HIGH_WATER = 1024 * 1024

#: Backlog parts handed to one `sendmsg` at most (the kernel's limit, IOV_MAX, is 1024).
_GATHER_PARTS = 64

_BROKEN = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)


class SocketIO:
    """Sync-first byte I/O on a trio socket stream.

    One task may receive at a time, and one task may run `flush_forever()` (or `flush()`);
    any number of tasks may `write()`.
    """

    def __init__(self, stream: trio.SocketStream, high_water: int = DEFAULT_HIGH_WATER) -> None:
        self.stream = stream
        self._sock = socket.socket(fileno=os.dup(stream.socket.fileno()))
        self._sock.setblocking(False)
        self._high_water = high_water
        # The parts not yet written, as views of the callers' bytes: queueing copies nothing.
        self._backlog: collections.deque[memoryview] = collections.deque()
        self._backlog_bytes = 0
        self._room = trio.lowlevel.ParkingLot()  # senders waiting for the backlog to shrink
        self._queued = trio.lowlevel.ParkingLot()  # the flusher, waiting for a backlog
        self._closing = False
        self._closed = False
        self._broken: BaseException | None = None

    @property
    def backlog(self) -> int:
        return self._backlog_bytes

    async def receive_some(self, max_bytes: int) -> bytes:
        """Bytes the peer sent, or b"" at end of stream.

        Exactly one schedule point, as trio's own streams have. Cancellation: nothing that
        was received is lost.
        """
        return await self._receive(self._sock.recv, max_bytes)

    async def receive_into(self, buffer: bytearray | memoryview) -> int:
        """Receive into `buffer`; how many bytes, 0 at end of stream. Schedule point and
        cancellation as `receive_some`."""
        return await self._receive(self._sock.recv_into, buffer)

    async def _receive(self, operation: Callable[[A], R], argument: A) -> R:
        waited = False
        while True:
            self._check_open()
            try:
                result = operation(argument)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self._sock)
                waited = True
                continue
            except _BROKEN as exc:
                raise trio.BrokenResourceError(str(exc)) from exc
            if not waited:
                await trio.lowlevel.cancel_shielded_checkpoint()
            return result

    async def write(self, data: bytes, *more: bytes) -> None:
        """Queue `data` (and `more`, gathered without copying them together) whole, or
        raise: never part of it.

        Waits (checkpointing) only while the backlog is over its limit; otherwise returns
        without a schedule point, having handed what it could to the kernel. Cancellation:
        if cancelled, nothing of `data` was queued.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while self._backlog_bytes >= self._high_water and not self._closing:
            self._check_open()
            await self._room.park()
        self._check_open()
        if self._closing:
            raise trio.ClosedResourceError("the connection is closing")
        self._put((data, *more))

    def write_nowait(self, data: bytes) -> None:
        """Queue a small control message (a WebSocket close) past the backlog limit, or drop
        it if the connection is already closing or broken."""
        if self._closing or self._closed or self._broken is not None:
            return
        with contextlib.suppress(trio.BrokenResourceError):  # then nobody reads it anyway
            self._put((data,))

    def _put(self, parts: tuple[bytes, ...]) -> None:
        """Hand `parts` to the kernel if nothing is queued before them; queue the rest."""
        if not self._backlog:
            total = sum(map(len, parts))
            try:
                if len(parts) > 1:
                    # What is past the gather limit simply goes to the backlog, below.
                    sent = self._sock.sendmsg(parts[:_GATHER_PARTS], (), socket.MSG_NOSIGNAL)
                else:
                    sent = self._sock.send(parts[0], socket.MSG_NOSIGNAL)
            except BlockingIOError:
                sent = 0
            except _BROKEN as exc:
                self._break(exc)
                raise trio.BrokenResourceError(str(exc)) from exc
            if sent == total:
                return
            for part in parts:  # queue what the kernel did not take
                if sent >= len(part):
                    sent -= len(part)
                    continue
                self._queue(memoryview(part)[sent:])
                sent = 0
        else:
            for part in parts:
                self._queue(memoryview(part))
        self._queued.unpark_all()

    def _queue(self, part: memoryview) -> None:
        if part:
            self._backlog.append(part)
            self._backlog_bytes += len(part)

    async def flush(self) -> None:
        """Write out the backlog. Cancellation: stops; what is left stays queued."""
        while self._backlog:
            self._check_open()
            await trio.lowlevel.wait_writable(self._sock)
            try:
                sent = self._sock.sendmsg(
                    itertools.islice(self._backlog, _GATHER_PARTS), (), socket.MSG_NOSIGNAL
                )
            except BlockingIOError:
                continue
            except _BROKEN as exc:
                self._break(exc)
                raise trio.BrokenResourceError(str(exc)) from exc
            self._consume(sent)
            if self._backlog_bytes < self._high_water:
                self._room.unpark_all()

    def _consume(self, sent: int) -> None:
        """Drop `sent` bytes, written, from the front of the backlog."""
        self._backlog_bytes -= sent
        backlog = self._backlog
        while sent:
            first = backlog[0]
            if sent < len(first):
                backlog[0] = first[sent:]
                return
            sent -= len(first)
            backlog.popleft()

    async def flush_forever(self) -> None:
        """Flush whenever something is queued; return once `close_when_flushed()` was called
        and everything queued is written. Cancellation: stops flushing."""
        while True:
            await self.flush()
            if self._closing:
                return
            await self._queued.park()

    def close_when_flushed(self) -> None:
        """Refuse further writes; `flush_forever()` returns once the backlog is out."""
        self._closing = True
        self._queued.unpark_all()
        self._room.unpark_all()

    async def aclose(self) -> None:
        """Close now, dropping any backlog. Tasks waiting on the socket get
        ClosedResourceError."""
        if not self._closed:
            self._closed = True
            self._room.unpark_all()
            self._queued.unpark_all()
            trio.lowlevel.notify_closing(self._sock)
            self._sock.close()
        await self.stream.aclose()

    def _break(self, exc: BaseException) -> None:
        self._broken = exc
        self._backlog.clear()
        self._backlog_bytes = 0
        self._room.unpark_all()

    def _check_open(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("the connection is closed")
        if self._broken is not None:
            raise trio.BrokenResourceError(str(self._broken))
