"""PTY master descriptors: opening, sizing, foreground group, closing.

The daemon keeps only the master side; the slave is opened by the child itself (see
`spawn.terminal_stdio`), so when the child and its descendants are gone the master reads EIO
and the terminal's output is known to be complete.
"""

from __future__ import annotations

import fcntl
import os
import struct
import termios

import trio


class Pty:
    def __init__(self, cols: int, rows: int) -> None:
        master, slave = os.openpty()
        try:
            self.slave_path = os.ttyname(slave)
        finally:
            os.close(slave)  # the child opens it by path; holding it would hide EOF
        os.set_blocking(master, False)
        self.master = master
        self.closed = False
        self.resize(cols, rows)

    def resize(self, cols: int, rows: int) -> None:
        """Set the window size; the kernel sends SIGWINCH to the foreground process group."""
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def foreground_group(self) -> int:
        """The process group the terminal's line discipline would send Ctrl-C to."""
        return os.tcgetpgrp(self.master)

    async def write(self, data: bytes) -> None:
        """Write everything, waiting (not blocking the event loop) while the program does not
        read its input.

        Cancellation: part of `data` may have been written.
        """
        view = memoryview(data)
        while view:
            try:
                written = os.write(self.master, view)
            except BlockingIOError:
                await trio.lowlevel.wait_writable(self.master)
                continue
            view = view[written:]

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            trio.lowlevel.notify_closing(self.master)  # wakes waiting writers
            os.close(self.master)
