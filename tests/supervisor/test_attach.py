"""`supervisor term` and `supervisor attach`, driven through a real pseudo-terminal."""

from __future__ import annotations

import re
import select
import sys
import time

import ptyprocess
import trio

from supervisor.client import open_client

from .conftest import Daemon


class Keyboard:
    """A person at a terminal: types keys, reads the screen, waits for what they expect."""

    def __init__(self, argv: list[str], rows: int = 30, cols: int = 100) -> None:
        self.pty = ptyprocess.PtyProcess.spawn(argv, dimensions=(rows, cols))
        self.seen = b""
        self._consumed = 0  # expect() looks only after the previous match, like expect(1)

    def type(self, keys: bytes) -> None:
        self.pty.write(keys)

    def expect(self, pattern: bytes, timeout: float = 15.0) -> re.Match[bytes]:
        start = self._consumed
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while (match := regex.search(self.seen, start)) is None:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"never saw {pattern!r}; screen: {self.seen[-400:]!r}"
            readable, _, _ = select.select([self.pty.fd], [], [], remaining)
            if readable:
                try:
                    self.seen += self.pty.read(65536)
                except EOFError:
                    assert regex.search(self.seen, start), f"ended without {pattern!r}"
        self._consumed = match.end()
        return match

    def exit_code(self) -> int:
        status = self.pty.wait()
        assert isinstance(status, int)
        return status


def cli(daemon: Daemon, *args: str) -> list[str]:
    return [sys.executable, "-m", "supervisor", *args[:1], "--connect", daemon.unix, *args[1:]]


def test_term_type_resize_detach_reattach(daemon: Daemon) -> None:
    term = cli(daemon, "term", "--env", "PS1=$ ", "--", "bash", "--norc", "--noprofile")
    wrapped = " ".join(f"'{a}'" for a in term)
    person = Keyboard(["sh", "-c", f"stty -g; {wrapped}; echo CLI-EXIT=$?; stty -g"])
    before = person.expect(rb"^([0-9a-f:]+)\r\n").group(1)
    person.expect(rb"\$ ")
    person.type(b"echo $((6*7))\r")
    person.expect(rb"\r42\r\n")

    # Resize the local window: the remote program sees the new size.
    person.pty.setwinsize(40, 120)
    for _ in range(50):  # the CLI forwards SIGWINCH; look until the daemon has it
        person.type(b"stty size\r")
        if b"40 120" in person.expect(rb"\r\d+ \d+\r\n").group(0):
            break
    else:
        raise AssertionError("the resize never reached the remote terminal")

    # Ctrl-] detaches: the CLI exits 0, says how to come back, and restores the terminal.
    person.type(b"\x1d")
    hint = person.expect(rb"reattach with: supervisor attach (\S+) --since (\S+)\]")
    terminal_id, cursor = hint.group(1).decode(), hint.group(2).decode()
    person.expect(rb"CLI-EXIT=0\r\n")
    after = person.expect(rb"([0-9a-f:]+)\r\n").group(1)
    assert after == before  # raw mode undone
    assert person.exit_code() == 0

    # Meanwhile the terminal runs on and prints something.
    async def meanwhile() -> None:
        async with open_client(daemon.unix) as c:
            assert (await c.call("terminal.get", {"id": terminal_id}))["status"] == "running"
            await c.call("terminal.write", {"id": terminal_id, "data": b"echo while-''away\r"})

    trio.run(meanwhile)

    # Reattach with the cursor: what was printed meanwhile is replayed, nothing older.
    back = Keyboard(cli(daemon, "attach", terminal_id, "--since", cursor), rows=40, cols=120)
    back.expect(rb"\rwhile-away\r\n")
    assert b"42" not in back.seen
    back.type(b"exit 9\r")
    back.expect(rb"exit")
    assert back.exit_code() == 9


def test_term_runs_a_command_and_exits_with_its_code(daemon: Daemon) -> None:
    person = Keyboard(cli(daemon, "term", "--", "sh", "-c", "echo one-shot; exit 3"))
    person.expect(rb"one-shot")
    assert person.exit_code() == 3


def test_attach_unknown_terminal_is_one_line(daemon: Daemon) -> None:
    person = Keyboard(cli(daemon, "attach", f"term-{daemon.instance}-9999"))
    person.expect(rb"TERMINAL_NOT_FOUND")
    assert person.exit_code() == 1
