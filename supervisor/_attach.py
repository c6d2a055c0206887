"""Attaching the local terminal to a remote one: `supervisor term` and `supervisor attach`.

The local terminal goes to raw mode (restored on every exit path), keystrokes go to the
remote PTY as bytes, window size changes follow, and Ctrl-] detaches, leaving the remote
terminal running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import termios
import tty
from collections.abc import Iterator
from typing import Any

import trio

from .client import Client

DETACH_KEY = b"\x1d"  # Ctrl-]
DETACH_NAME = "Ctrl-]"


@contextlib.contextmanager
def raw_mode(fd: int) -> Iterator[None]:
    """Raw mode on a terminal descriptor; a no-op when `fd` is not a terminal."""
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def local_size() -> tuple[int, int]:
    for fd in (0, 1):
        with contextlib.suppress(OSError):
            size = os.get_terminal_size(fd)
            return size.columns, size.lines
    return 80, 24


class _Session:
    def __init__(self, client: Client, terminal_id: str, cursor: str | None) -> None:
        self.client = client
        self.id = terminal_id
        self.cursor = cursor
        self.exit: dict[str, Any] | None = None
        self.detached = False
        self.ended = False

    async def show_output(self, cancel: trio.CancelScope) -> None:
        async with self.client.terminal.output(self.id, since=self.cursor, follow=True) as events:
            async for event in events:
                self.cursor = event.get("cursor", self.cursor)
                if event["type"] == "data":
                    sys.stdout.buffer.write(event["data"])
                    sys.stdout.buffer.flush()
                elif event["type"] == "terminal":
                    self.exit = event.get("exit")
                    self.ended = True
        cancel.cancel()

    async def send_input(self, cancel: trio.CancelScope) -> None:
        while True:
            await trio.lowlevel.wait_readable(0)
            data = os.read(0, 4096)
            if not data:
                return  # local input ended; keep showing output
            before, key, _ = data.partition(DETACH_KEY)
            if before:
                await self.client.terminal.write(self.id, before)
            if key:
                self.detached = True
                cancel.cancel()
                return

    async def follow_signals(self, cancel: trio.CancelScope) -> None:
        with trio.open_signal_receiver(signal.SIGWINCH, signal.SIGTERM, signal.SIGHUP) as signals:
            async for signum in signals:
                if signum != signal.SIGWINCH:
                    self.detached = True  # told to stop: leave the remote terminal running
                    cancel.cancel()
                    return
                cols, rows = local_size()
                await self.client.call(
                    "terminal.resize", {"id": self.id, "cols": cols, "rows": rows}
                )


async def attach(client: Client, terminal_id: str, *, since: str | None = None) -> int:
    """Attach until the remote program ends (its exit code) or the user detaches (0)."""
    session = _Session(client, terminal_id, since)
    with raw_mode(0):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(session.show_output, nursery.cancel_scope)
            nursery.start_soon(session.send_input, nursery.cancel_scope)
            nursery.start_soon(session.follow_signals, nursery.cancel_scope)
    if session.detached and not session.ended:
        resume = f" --since {session.cursor}" if session.cursor else ""
        print(
            f"\r\n[detached from {terminal_id}; reattach with: supervisor attach "
            f"{terminal_id}{resume}]",
            file=sys.stderr,
        )
        return 0
    exit = session.exit
    return 1 if exit is None else int(exit["code"])


def default_shell() -> str:
    """The user's login shell, else bash, else sh."""
    import pwd

    with contextlib.suppress(KeyError):
        shell = pwd.getpwuid(os.getuid()).pw_shell
        if shell and os.access(shell, os.X_OK):
            return shell
    for candidate in ("/bin/bash", "/bin/sh"):
        if os.access(candidate, os.X_OK):
            return candidate
    return "/bin/sh"
