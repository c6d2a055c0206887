"""The 1.0 terminal contract, on real PTYs with real shells."""

from __future__ import annotations

import psutil
import pytest
import trio

from protocol import SupervisorError
from supervisor.client import Client, open_client

from .conftest import Daemon
from .terms import SHELL, Screen, open_shell, run


async def error_of(awaitable: object) -> SupervisorError:
    with pytest.raises(SupervisorError) as info:
        await awaitable  # type: ignore[misc]
    return info.value


async def test_echo_hi_in_bash(client: Client, daemon: Daemon) -> None:
    terminal, screen = await open_shell(client, cols=100, rows=30)
    assert terminal["status"] == "running"
    assert terminal["command"] == SHELL and terminal["cwd"] == str(daemon.dir / "ws")
    assert (terminal["cols"], terminal["rows"]) == (100, 30)
    assert terminal["id"].startswith(f"term-{daemon.instance}-")
    await run(client, screen, "echo h''i", rb"\rhi\r\n")
    await client.call("terminal.terminate", {"id": terminal["id"]})


async def test_exit_code_and_snapshot(client: Client) -> None:
    terminal, screen = await open_shell(client)
    await client.terminal.write(terminal["id"], b"exit 7\r")  # the typed helpers
    exit = await client.terminal.wait_exit(terminal["id"], timeout_ms=10_000)
    assert exit == {"code": 7, "signal": None, "timed_out": False}
    snap = await client.terminal.get(terminal["id"])
    assert snap is not None
    assert [t["id"] for t in await client.terminal.list() if t["id"] == terminal["id"]]
    assert snap["status"] == "exited" and snap["exit"] == exit
    await screen.until_end()
    last = screen.events[-1]
    assert last["type"] == "terminal" and last["state"] == "exited"
    assert last["terminal_id"] == terminal["id"] and last["exit"] == exit
    assert all(e["terminal_id"] == terminal["id"] for e in screen.events)
    assert {e["type"] for e in screen.events} == {"data", "terminal"}


async def test_controlling_terminal_job_control_and_term(client: Client) -> None:
    terminal, screen = await open_shell(client)
    await run(client, screen, "echo TERM=$TERM", rb"TERM=xterm-256color\r\n")
    await run(client, screen, "tty", rb"/dev/pts/\d+\r\n")
    # The shell leads its own session, and the PTY is that session's terminal.
    await run(client, screen, "ps -o sid=,tpgid= -p $$ | tr -s ' ' ':'", rb"\d+:\d+\r\n")
    # (Quotes split the expected words, so the echo of the typed line cannot match.)
    await run(client, screen, "[ $(ps -o sid= -p $$) -eq $$ ] && echo LEA''DER", rb"LEADER\r\n")
    # Job control: a background job, brought to the foreground, stopped with Ctrl-Z.
    await run(client, screen, "sleep 300 &", rb"\[1\] \d+")
    await run(client, screen, "jobs", rb"\[1\]\+\s+Running\s+sleep 300")
    await client.call("terminal.write", {"id": terminal["id"], "data": b"fg\r"})
    await screen.expect(rb"sleep 300\r\n")
    await client.call("terminal.write", {"id": terminal["id"], "data": b"\x1a"})  # Ctrl-Z
    await screen.expect(rb"Stopped\s+sleep 300")
    await run(client, screen, "kill -9 %1", rb"\$ ")
    await client.call("terminal.terminate", {"id": terminal["id"]})


async def test_launch_env_sets_term_and_overlays(client: Client) -> None:
    terminal, screen = await open_shell(client, env={"TERM": "vt100", "MINE": "x1"})
    await run(client, screen, "echo $TERM-$MINE", rb"vt100-x1\r\n")  # the echo shows $TERM
    await client.call("terminal.terminate", {"id": terminal["id"]})


async def test_interrupt_gives_the_prompt_back_with_130(client: Client) -> None:
    terminal, screen = await open_shell(client)
    start = len(screen.data)
    await client.call("terminal.write", {"id": terminal["id"], "data": b"sleep 100\r"})
    await screen.expect(rb"sleep 100\r\n", after=start)
    # The shell has put `sleep` in the foreground when the terminal's foreground group
    # is no longer the shell's own.
    with trio.fail_after(10):
        while True:
            interrupted = len(screen.data)
            await client.call("terminal.interrupt", {"id": terminal["id"]})
            try:
                with trio.fail_after(0.5):
                    await screen.expect(rb"\$ ", after=interrupted)
                break
            except trio.TooSlowError:
                continue
    await run(client, screen, "echo rc=$?", rb"rc=130\r\n")
    snap = await client.call("terminal.get", {"id": terminal["id"]})
    assert snap["status"] == "running"  # the shell survived
    await client.call("terminal.terminate", {"id": terminal["id"]})


async def test_resize_is_seen_with_sigwinch(client: Client) -> None:
    terminal, screen = await open_shell(client, cols=80, rows=24)
    await run(client, screen, "stty size", rb"24 80\r\n")
    await run(client, screen, "trap 'echo GOT-WIN''CH' WINCH", rb"\$ ")
    resized = len(screen.data)
    snap = await client.call("terminal.resize", {"id": terminal["id"], "cols": 132, "rows": 43})
    assert (snap["cols"], snap["rows"]) == (132, 43)
    # bash runs the trap when it next reads input.
    await run(client, screen, "stty size", rb"43 132\r\n")
    assert b"GOT-WINCH" in screen.data[resized:]
    got = await client.call("terminal.get", {"id": terminal["id"]})
    assert (got["cols"], got["rows"]) == (132, 43)
    err = await error_of(
        client.call("terminal.resize", {"id": terminal["id"], "cols": 0, "rows": 5})
    )
    assert (err.code, err.context["field"]) == ("VALIDATION_FAILED", "cols")
    await client.call("terminal.terminate", {"id": terminal["id"]})


async def test_last_bytes_before_exit_are_never_lost(client: Client) -> None:
    for i in range(30):
        terminal = await client.call(
            "terminal.create", {"argv": ["sh", "-c", f"seq 1 {i * 20}; printf LAST-{i}"]}
        )
        screen = Screen(client, terminal["id"])
        await screen.until_end()
        assert screen.data.endswith(f"LAST-{i}".encode())
        assert screen.events[-1]["exit"]["code"] == 0


FULL_SCREEN = (
    "import sys, os\n"
    "out = b'\\x1b[?1049h\\x1b[2J\\x1b[H'\n"
    "for row in range(1, 25):\n"
    "    out += b'\\x1b[%d;1H\\x1b[3%dm' % (row, row % 8) + ('row %02d ' % row).encode() * 9\n"
    "out += '\\u2502 box \\u2500 \\U0001f600'.encode() + b'\\x1b[0m'\n"
    "out = out * 60 + b'\\x1b[?1049l'  # 60 frames: more than one read of the PTY\n"
    "half = len(out) // 2\n"
    "for i in range(0, half, 97):\n"
    "    os.write(1, out[i:min(i + 97, half)])\n"
    "os.write(1, b'[half]')\n"
    "sys.stdin.readline()  # the second half waits for a line: the test reconnects between\n"
    "for i in range(half, len(out), 97):\n"
    "    os.write(1, out[i:i+97])\n"
)


async def test_full_screen_output_survives_a_reconnect_byte_exact(client: Client) -> None:
    from .procs import PY

    terminal = await client.call("terminal.create", {"argv": [PY, "-c", FULL_SCREEN]})
    first = Screen(client, terminal["id"])
    await first.expect(rb"\[half\]")
    await client.call("terminal.write", {"id": terminal["id"], "data": b"\n"})
    whole = Screen(client, terminal["id"])
    await whole.until_end()
    # A client that saw the first half reconnects with its cursor: it gets exactly the rest.
    resumed = Screen(client, terminal["id"])
    resumed.cursor = first.cursor
    await resumed.until_end()
    assert first.data + resumed.data == whole.data
    assert whole.data.startswith(b"\x1b[?1049h") and whole.data.endswith(b"\x1b[?1049l")
    assert "\U0001f600".encode() in whole.data


async def test_several_clients_follow_and_write_at_once(client: Client, daemon: Daemon) -> None:
    terminal, _ = await open_shell(client)
    seen: list[bytes] = []

    async def participant(n: int) -> None:
        async with open_client(daemon.unix) as c:
            screen = Screen(c, terminal["id"])
            await screen.expect(rb"\$ ")
            await c.call(
                "terminal.write", {"id": terminal["id"], "data": f"echo fro''m-{n}\r".encode()}
            )
            for k in range(3):
                await screen.expect(f"from-{k}\r\n".encode())
            seen.append(screen.data)

    async with trio.open_nursery() as nursery:
        for n in range(3):
            nursery.start_soon(participant, n)
    assert len(seen) == 3
    await client.call("terminal.terminate", {"id": terminal["id"]})


async def test_disconnect_and_cancelled_output_do_not_end_it(daemon: Daemon) -> None:
    async with open_client(daemon.unix) as first:
        terminal, screen = await open_shell(first)
        async with first.stream("terminal.output", {"id": terminal["id"], "follow": True}) as ev:
            async for _ in ev:
                break  # cancels the stream
    async with open_client(daemon.unix) as second:
        snap = await second.call("terminal.get", {"id": terminal["id"]})
        assert snap["status"] == "running"
        screen = Screen(second, terminal["id"])
        await run(second, screen, "echo still-here", rb"still-here\r\n")
        await second.call("terminal.terminate", {"id": terminal["id"]})


async def test_errors(client: Client, daemon: Daemon) -> None:
    other = "0000000000000000" if daemon.instance != "0000000000000000" else "1111111111111111"
    stale, unknown = f"term-{other}-1", f"term-{daemon.instance}-99999"
    for terminal_id in (stale, unknown, "garbage"):
        assert await client.call("terminal.get", {"id": terminal_id}) is None
    for method, extra in [
        ("terminal.write", {"data": b"x"}),
        ("terminal.resize", {"cols": 10, "rows": 10}),
        ("terminal.interrupt", {}),
        ("terminal.terminate", {}),
        ("terminal.wait_exit", {}),
    ]:
        err = await error_of(client.call(method, {"id": stale, **extra}))
        assert err.code == "STALE_TERMINAL_HANDLE" and err.context["terminal_id"] == stale
        err = await error_of(client.call(method, {"id": unknown, **extra}))
        assert err.code == "TERMINAL_NOT_FOUND"
    err = await error_of(client.call("terminal.create", {"argv": ["sh"], "cwd": "/nope"}))
    assert err.code == "INVALID_TERMINAL_CWD" and err.context["cwd"] == "/nope"
    fds_before = psutil.Process(daemon.proc.pid).num_fds()
    err = await error_of(client.call("terminal.create", {"argv": ["no-such-prog-xyz"]}))
    assert err.code == "PROCESS_SPAWN_FAILED"
    assert not [t for t in await client.call("terminal.list") if "no-such-prog-xyz" in t["command"]]
    assert psutil.Process(daemon.proc.pid).num_fds() == fds_before  # the PTY is closed again


async def test_control_of_a_finished_terminal_is_a_control_error(client: Client) -> None:
    terminal = await client.call("terminal.create", {"argv": ["true"]})
    await client.call("terminal.wait_exit", {"id": terminal["id"]})
    for method, extra in [
        ("terminal.write", {"data": b"x"}),
        ("terminal.resize", {"cols": 10, "rows": 10}),
        ("terminal.interrupt", {}),
        ("terminal.terminate", {}),
    ]:
        err = await error_of(client.call(method, {"id": terminal["id"], **extra}))
        assert err.code == "TERMINAL_CONTROL_ERROR"
        assert err.context["terminal_id"] == terminal["id"] and err.context["operation"]


async def test_invalid_terminal_cursors(client: Client) -> None:
    a = await client.call("terminal.create", {"argv": ["echo", "a"]})
    b = await client.call("terminal.create", {"argv": ["echo", "b"]})
    await client.call("terminal.wait_exit", {"id": a["id"]})
    for since in ["junk", f"{b['id']}:1", f"{a['id']}:99999"]:
        err = await error_of(read_output(client, a["id"], since))
        assert err.code == "INVALID_TERMINAL_CURSOR" and err.context["cursor"] == since


async def read_output(client: Client, terminal_id: str, since: str) -> None:
    async with client.stream("terminal.output", {"id": terminal_id, "since": since}) as ev:
        async for _ in ev:
            pass


async def test_input_never_blocks_the_daemon(client: Client, daemon: Daemon) -> None:
    """A program that never reads: a big write waits, everything else goes on."""
    stuck = await client.call("terminal.create", {"argv": ["sleep", "300"]})

    async def big_write() -> None:
        await client.call("terminal.write", {"id": stuck["id"], "data": b"x" * (1 << 20)})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(big_write)
        async with open_client(daemon.unix) as other:
            with trio.fail_after(5):
                await other.call("runtime.ping")
                terminal, screen = await open_shell(other)
                await run(other, screen, "echo respon''sive", rb"responsive\r\n")
                await other.call("terminal.terminate", {"id": terminal["id"]})
        nursery.cancel_scope.cancel()  # the stuck write is cancelled; the terminal lives on
    snap = await client.call("terminal.get", {"id": stuck["id"]})
    assert snap["status"] == "running"
    await client.call("terminal.terminate", {"id": stuck["id"]})


async def test_terminate_hangs_up_then_kills(client: Client) -> None:
    terminal, _ = await open_shell(client)
    snap = await client.call("terminal.terminate", {"id": terminal["id"]})
    assert snap["status"] == "exited" and snap["exit"]["signal"] == 1  # SIGHUP
    stubborn = await client.call(
        "terminal.create", {"argv": ["sh", "-c", "trap '' HUP; echo ready; exec sleep 300"]}
    )
    await Screen(client, stubborn["id"]).expect(rb"ready")
    with trio.fail_after(10):
        snap = await client.call("terminal.terminate", {"id": stubborn["id"]})
    assert snap["exit"]["signal"] == 9


async def test_50_terminals_at_once_stay_responsive(client: Client, daemon: Daemon) -> None:
    async with open_client(daemon.unix) as c:
        terminals = []
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:

                async def one(n: int) -> None:
                    terminal, screen = await open_shell(c)
                    terminals.append(terminal["id"])
                    await run(c, screen, f"echo T{n}-$((n=({n}*3)))", f"T{n}-{n * 3}\r\n".encode())

                for n in range(50):
                    nursery.start_soon(one, n)
            assert len(await c.call("terminal.list")) >= 50
            for terminal_id in terminals:
                await c.call("terminal.terminate", {"id": terminal_id})
