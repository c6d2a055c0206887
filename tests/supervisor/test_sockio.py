"""SocketIO on real socket pairs: whole frames or nothing, a bounded backlog, no SIGPIPE."""

from __future__ import annotations

import os
import socket

import pytest
import trio
import trio.testing

from supervisor.sockio import SocketIO

HIGH_WATER = 64 * 1024


def socket_pair() -> tuple[SocketIO, socket.socket]:
    ours, theirs = socket.socketpair()
    io = SocketIO(trio.SocketStream(trio.socket.from_stdlib_socket(ours)), HIGH_WATER)
    return io, theirs


async def drain_into(received: list[bytes], peer: socket.socket) -> None:
    received.append(await trio.to_thread.run_sync(read_all, peer))


def read_all(peer: socket.socket) -> bytes:
    peer.setblocking(True)
    chunks = []
    while chunk := peer.recv(1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


async def test_writes_are_whole_in_order_and_flushed_before_close() -> None:
    io, peer = socket_pair()
    frames = [bytes([i]) * (i * 9973) for i in range(1, 60)]  # far more than the kernel holds
    async with trio.open_nursery() as nursery:
        received: list[bytes] = []
        nursery.start_soon(drain_into, received, peer)
        async with trio.open_nursery() as writers:
            writers.start_soon(io.flush_forever)
            for frame in frames:
                await io.write(frame)
            io.close_when_flushed()
        await io.aclose()
    assert received == [b"".join(frames)]
    peer.close()


async def test_backlog_is_bounded_while_the_peer_does_not_read() -> None:
    io, peer = socket_pair()
    frame = b"x" * 16384
    written = 0

    async def writer() -> None:
        nonlocal written
        while True:
            await io.write(frame)
            written += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        await trio.testing.wait_all_tasks_blocked()  # the writer waits for room
        assert HIGH_WATER <= io.backlog < HIGH_WATER + len(frame)
        stuck_at = written
        await trio.testing.wait_all_tasks_blocked()
        assert written == stuck_at
        nursery.cancel_scope.cancel()
    await io.aclose()
    peer.close()


async def test_a_cancelled_writer_queues_nothing() -> None:
    io, peer = socket_pair()
    await io.write(b"a" * (HIGH_WATER * 8))  # fills the kernel buffer, then the backlog
    backlog = io.backlog
    async with trio.open_nursery() as nursery:
        nursery.start_soon(io.write, b"never" * 100)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert io.backlog == backlog
    async with trio.open_nursery() as nursery:
        received: list[bytes] = []
        nursery.start_soon(drain_into, received, peer)
        await io.flush()
        await io.aclose()
    assert received == [b"a" * (HIGH_WATER * 8)]
    peer.close()


async def test_a_peer_that_hung_up_is_broken_resource_not_sigpipe() -> None:
    io, peer = socket_pair()
    peer.close()
    with pytest.raises(trio.BrokenResourceError):
        for _ in range(100):
            await io.write(b"x" * 65536)
    with pytest.raises(trio.BrokenResourceError):
        await io.write(b"x")
    await io.aclose()


async def test_receive_and_close_wake_a_waiting_reader() -> None:
    io, peer = socket_pair()
    peer.send(b"hello")
    assert await io.receive_some(100) == b"hello"
    async with trio.open_nursery() as nursery:

        async def reader() -> None:
            with pytest.raises(trio.ClosedResourceError):
                await io.receive_some(100)

        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        await io.aclose()
    peer.close()


async def test_end_of_stream_and_its_own_descriptor_is_closed() -> None:
    io, peer = socket_pair()
    before = set(os.listdir("/proc/self/fd"))
    peer.shutdown(socket.SHUT_WR)
    assert await io.receive_some(100) == b""
    await io.aclose()
    assert set(os.listdir("/proc/self/fd")) < before
    peer.close()


async def test_gathered_parts_arrive_whole_and_in_order() -> None:
    """write(header, body) goes out with one sendmsg when it can; what the kernel does not
    take is queued part by part, from the exact byte where the send stopped."""
    io, peer = socket_pair()
    frames = [(i.to_bytes(4, "big"), bytes([i % 251]) * (i * 7919)) for i in range(1, 40)]
    async with trio.open_nursery() as nursery:
        received: list[bytes] = []
        nursery.start_soon(drain_into, received, peer)
        async with trio.open_nursery() as writers:
            writers.start_soon(io.flush_forever)
            for header, body in frames:
                await io.write(header, body)
            io.close_when_flushed()
        await io.aclose()
    assert received == [b"".join(h + b for h, b in frames)]
    peer.close()


async def test_a_write_in_more_parts_than_one_sendmsg_takes_arrives_whole() -> None:
    """A gathering write takes at most IOV_MAX parts; SocketIO sends what one call may and
    queues the rest, for any number of parts."""
    io, peer = socket_pair()
    parts = [bytes([n % 256]) * (1 + n % 7) for n in range(3000)]
    async with trio.open_nursery() as nursery:
        received: list[bytes] = []
        nursery.start_soon(drain_into, received, peer)
        try:
            async with trio.open_nursery() as writers:
                writers.start_soon(io.flush_forever)
                await io.write(*parts)
                io.close_when_flushed()
        finally:
            await io.aclose()  # the reading thread sees the end even if the write failed
    assert received == [b"".join(parts)]
    peer.close()
