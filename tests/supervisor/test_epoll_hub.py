"""EpollHub on real pipes: readiness reaches the right callback, pause and resume, removal,
and one failing callback costs only its own descriptor."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
import trio

from supervisor.epoll_hub import EpollHub

from .serving import serving


@pytest.fixture
async def hub() -> AsyncIterator[EpollHub]:
    hub = EpollHub()
    async with serving(hub.serve):
        yield hub


class Pipe:
    """A pipe whose read end drains into `received` when the hub calls it."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        self.received = b""
        self.arrived = trio.Event()

    def drain(self) -> None:
        while True:
            try:
                data = os.read(self.r, 65536)
            except BlockingIOError:
                return
            self.received += data
            self.arrived.set()
            if not data:
                return

    def close(self) -> None:
        for fd in (self.r, self.w):
            with contextlib.suppress(OSError):
                os.close(fd)


@pytest.fixture
def pipes() -> Iterator[Callable[[], Pipe]]:
    made: list[Pipe] = []

    def make() -> Pipe:
        made.append(Pipe())
        return made[-1]

    yield make
    for pipe in made:
        pipe.close()


async def test_each_ready_descriptor_reaches_its_own_callback(
    hub: EpollHub, pipes: Callable[[], Pipe]
) -> None:
    a, b = pipes(), pipes()
    hub.add(a.r, a.drain)
    hub.add(b.r, b.drain)
    os.write(b.w, b"to b")
    with trio.fail_after(5):
        await b.arrived.wait()
    os.write(a.w, b"to a")
    with trio.fail_after(5):
        await a.arrived.wait()
    assert (a.received, b.received) == (b"to a", b"to b")


async def test_a_paused_descriptor_is_not_reported_until_resumed(
    hub: EpollHub, pipes: Callable[[], Pipe]
) -> None:
    paused, other = pipes(), pipes()
    hub.add(paused.r, paused.drain)
    hub.add(other.r, other.drain)
    hub.pause(paused.r)
    os.write(paused.w, b"waiting")
    os.close(paused.w)  # a hang-up is reported whatever the mask: pausing must cover it too
    # Another descriptor's round trip proves the hub has run rounds meanwhile.
    for _ in range(3):
        other.arrived = trio.Event()
        os.write(other.w, b".")
        with trio.fail_after(5):
            await other.arrived.wait()
    assert paused.received == b""
    hub.resume(paused.r)
    with trio.fail_after(5):
        await paused.arrived.wait()
    assert paused.received == b"waiting"


async def test_a_removed_descriptor_is_forgotten(hub: EpollHub, pipes: Callable[[], Pipe]) -> None:
    gone, other = pipes(), pipes()
    hub.add(gone.r, gone.drain)
    hub.add(other.r, other.drain)
    hub.remove(gone.r)
    assert gone.r not in hub
    os.write(gone.w, b"nobody listens")
    os.write(other.w, b"x")
    with trio.fail_after(5):
        await other.arrived.wait()
    assert gone.received == b""
    hub.remove(gone.r)  # twice is harmless


async def test_a_failing_callback_costs_only_its_own_descriptor(
    hub: EpollHub, pipes: Callable[[], Pipe], caplog: pytest.LogCaptureFixture
) -> None:
    broken, healthy = pipes(), pipes()

    called = trio.Event()

    def fail() -> None:
        called.set()
        raise RuntimeError("a bug in one owner")

    hub.add(broken.r, fail)
    hub.add(healthy.r, healthy.drain)
    os.write(broken.w, b"boom")
    os.write(healthy.w, b"fine")
    with trio.fail_after(5):
        await healthy.arrived.wait()
    with trio.fail_after(5):
        await called.wait()  # the hub drops it before it next yields
    assert broken.r not in hub
    assert "failed; dropped" in caplog.text
    healthy.arrived = trio.Event()
    os.write(healthy.w, b" still")
    with trio.fail_after(5):
        await healthy.arrived.wait()
    assert healthy.received == b"fine still"


async def test_owners_may_still_let_go_after_the_hub_has_stopped(
    pipes: Callable[[], Pipe],
) -> None:
    """At shutdown the hub stops first; exits reaped afterwards still end their pumps."""
    hub = EpollHub()
    a, b = pipes(), pipes()
    async with trio.open_nursery() as nursery:
        await nursery.start(hub.serve)
        hub.add(a.r, a.drain)
        hub.add(b.r, b.drain)
        hub.pause(b.r)
        nursery.cancel_scope.cancel()
    hub.pause(a.r)
    hub.resume(b.r)
    hub.remove(a.r)
    hub.remove(b.r)
    assert a.r not in hub and b.r not in hub
