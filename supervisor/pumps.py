"""Pumps: move what a child writes on its descriptors into its ring log, whoever listens.

A pump is not a task: the hub calls it when its descriptor is readable, and it reads a
bounded amount and returns. It ends at end of file (or EIO, which is how a PTY master says
that the last slave descriptor has closed).

When the child has finished but something else still holds the other end (an escaped
descendant, a background job on a terminal), end of file may never come: `settle()` waits a
short grace for it, then takes only what is already buffered (bounded) and stops. Exit is
not EOF.

Under block flow a pump whose log refuses a chunk holds that one chunk, leaves the hub (so
the pipe fills and the child's writes block), and goes back when a reader makes room.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os

import trio

from .epoll_hub import EpollHub
from .ringlog import RingLog

#: Bytes a pump moves per call from the hub when its child writes without pause: then it
#: returns, so one fast writer still shares the loop.
ROUND_BYTES = 256 * 1024
#: A pipe found full is grown to this, once: a child that writes without pause then hands
#: over four times as much per read, with a quarter of the wake-ups on both sides. Only
#: pipes that filled grow, so a thousand quiet children cost the kernel nothing more (an
#: unprivileged user has a budget of pipe pages, and a pipe made past it gets 8 KiB).
FULL_PIPE_GROWS_TO = 256 * 1024
_F_SETPIPE_SZ = 1031  # fcntl.F_SETPIPE_SZ, which Python 3.11 does not name


class _Pump:
    def __init__(self, group: Pumps, fd: int, stream: str, *, grows: bool) -> None:
        self.group = group
        self.fd = fd
        self.stream = stream
        self.read_size = group.read_size
        self.grows = grows and group.log.max_chunk > self.read_size  # else reads stay small
        self.open = True
        self.held: bytes | None = None  # a chunk the log refused (block flow)

    def pull(self, budget: int) -> None:
        """Read what is there, up to `budget` bytes; end at EOF."""
        group = self.group
        while self.open and self.held is None and budget > 0:
            try:
                data = os.read(self.fd, self.read_size)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno != errno.EIO:
                    group.error = exc
                self.end()
                return
            if not data:
                self.end()
                return
            budget -= len(data)
            if self.grows and len(data) == self.read_size:
                self._grow()
            if not group.log.offer(self.stream, data):
                self.held = data
                group.hub.pause(self.fd)
                group.log.when_room(self._retry_held)

    def _grow(self) -> None:
        self.grows = False
        try:
            fcntl.fcntl(self.fd, _F_SETPIPE_SZ, FULL_PIPE_GROWS_TO)
        except OSError:
            return  # past the user's pipe budget (EPERM): it stays as it is
        self.read_size = min(FULL_PIPE_GROWS_TO, self.group.log.max_chunk)

    def _retry_held(self) -> None:
        if not self.open or self.held is None:
            return
        if not self.group.log.offer(self.stream, self.held):
            self.group.log.when_room(self._retry_held)
            return
        self.held = None
        self.group.hub.resume(self.fd)

    def end(self) -> None:
        if self.open:
            self.open = False
            self.group.hub.remove(self.fd)
            self.group._pump_ended()


class Pumps:
    """The pumps of one launch, into one log. It owns the descriptors from the start, so a
    launch that fails part way closes them all with `close()`."""

    def __init__(
        self,
        hub: EpollHub,
        log: RingLog,
        sources: list[tuple[int, str]],
        *,
        read_size: int,
        drain_limit: int,
        grows: bool = False,
    ) -> None:
        """`sources`: (descriptor, stream name) pairs. `grows`: they are pipes that may be
        enlarged once found full (see FULL_PIPE_GROWS_TO)."""
        self.hub = hub
        self.log = log
        self.read_size = min(read_size, log.max_chunk)
        self._drain_limit = drain_limit
        self._pumps = [_Pump(self, fd, stream, grows=grows) for fd, stream in sources]
        self._done = trio.Event()
        #: The first unexpected read error; the pump that met it has stopped.
        self.error: OSError | None = None

    def start(self) -> None:
        """Put every descriptor on the hub (non-blocking)."""
        for pump in self._pumps:
            os.set_blocking(pump.fd, False)
            self.hub.add(pump.fd, functools.partial(pump.pull, ROUND_BYTES))

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _pump_ended(self) -> None:
        if not any(pump.open for pump in self._pumps):
            self._done.set()

    def pull_now(self) -> bool:
        """Take what is readable right now, without waiting; True when every pump has ended.

        The child's descriptors close before its parent hears that it exited, so once its
        exit is known a pipe nobody else holds reads to EOF here, with no round of the hub.
        """
        for pump in self._pumps:
            if pump.held is None:
                pump.pull(self._drain_limit)
        return self.done

    async def settle(self, grace: float) -> None:
        """Return once every pump has ended: at EOF within `grace`, else after a last,
        bounded drain. The log stops holding the writer back from then on.

        Cancellation: the pumps stay as they are; call again to finish.
        """
        with trio.move_on_after(grace):
            await self._done.wait()
            return
        self.log.release()  # a held chunk goes in now (see `_retry_held`)
        for pump in self._pumps:
            pump.pull(self._drain_limit)
            pump.end()

    def stop(self) -> None:
        """End every pump; the descriptors stay open (a PTY master is its `Pty`'s to close)."""
        for pump in self._pumps:
            pump.end()

    def close(self) -> None:
        """End every pump and close its descriptor."""
        self.stop()
        for pump in self._pumps:
            os.close(pump.fd)
        self._pumps.clear()
