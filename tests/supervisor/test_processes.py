"""The 1.0 process contract, against a real daemon with real children."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

import psutil
import pytest
import trio

from protocol import SupervisorError
from supervisor.client import Client, open_client

from .conftest import Daemon
from .procs import PY, collect, data_of, poll_until, py, wait_gone, zombie_children


async def error_of(awaitable: object) -> SupervisorError:
    with pytest.raises(SupervisorError) as info:
        await awaitable  # type: ignore[misc]
    return info.value


# -- launch ---------------------------------------------------------------------------------


async def test_launch_reply_and_exact_argv(client: Client, daemon: Daemon) -> None:
    """argv reaches the program as is: no shell, no escaping, empty entries kept."""
    argv = ["printf", "%s|", "a b", "", "$HOME", "*", "'q'"]
    p = await client.process.exec(argv)
    assert p["state"] == "running"
    assert p["command"] == argv
    assert p["cwd"] == str(daemon.dir / "ws")
    assert p["id"].startswith(f"proc-{daemon.instance}-")
    assert p["pid"] > 0 and p["started_at"].endswith("Z")
    out = await client.process.output(p["id"])
    assert out["stdout"] == b"a b||$HOME|*|'q'|"
    assert out["exit_code"] == 0 and out["signal"] is None and out["timed_out"] is False


async def test_stdin_is_dev_null_and_streams_are_separate_bytes(client: Client) -> None:
    everything = bytes(range(256))
    code = (
        "import os, sys; sys.stdout.buffer.write(bytes(range(256)));"
        "sys.stderr.buffer.write(b'err\\xff');"
        "print(os.readlink('/proc/self/fd/0'), file=sys.stderr, end='');"
        "sys.exit(len(sys.stdin.read()))"
    )
    p = await client.process.exec(py(code))
    out = await client.process.output(p["id"])
    assert out["stdout"] == everything
    assert out["stderr"] == b"err\xff/dev/null"
    assert out["exit_code"] == 0


async def test_cwd_default_relative_and_absolute(client: Client, daemon: Daemon) -> None:
    workspace = daemon.dir / "ws"
    (workspace / "sub").mkdir(exist_ok=True)
    for cwd, expected in [(None, workspace), ("sub", workspace / "sub"), ("/", "/")]:
        p = await client.process.exec(["pwd"], cwd=cwd)
        assert p["cwd"] == str(expected)
        assert (await client.process.output(p["id"]))["stdout"] == f"{expected}\n".encode()


async def test_bad_cwd(client: Client, daemon: Daemon) -> None:
    (daemon.dir / "ws" / "file").write_text("x")
    for cwd in ["/does/not/exist", "file"]:
        err = await error_of(client.process.exec(["true"], cwd=cwd))
        assert err.code == "INVALID_PROCESS_CWD"
        assert err.context["cwd"].endswith(cwd.lstrip("/")) and err.context["reason"]


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["definitely-not-a-program-xyz"], "not found in PATH"),
        (["/nonexistent/prog"], "No such file or directory"),
        (["./not-executable"], "Permission denied"),
        (["./garbage-binary"], "Exec format error"),
        (["/"], "Permission denied"),
    ],
)
async def test_spawn_failure_leaves_nothing_behind(
    client: Client, daemon: Daemon, argv: list[str], reason: str
) -> None:
    workspace = daemon.dir / "ws"
    (workspace / "not-executable").write_text("#!/bin/sh\n")
    (workspace / "not-executable").chmod(0o644)
    (workspace / "garbage-binary").write_bytes(b"\x00\x01garbage")
    (workspace / "garbage-binary").chmod(0o755)
    before_fds = psutil.Process(daemon.proc.pid).num_fds()
    before_ids = {p["id"] for p in await client.process.list()}
    err = await error_of(client.process.exec(argv))
    assert err.code == "PROCESS_SPAWN_FAILED"
    assert err.context["command"] == argv and err.context["cwd"]
    assert reason in err.context["reason"]
    assert {p["id"] for p in await client.process.list()} == before_ids  # no phantom record
    assert psutil.Process(daemon.proc.pid).num_fds() == before_fds
    assert zombie_children(daemon.proc.pid) == []


async def test_argv_validation(client: Client) -> None:
    for argv, field in [
        ([], "argv"),
        ([""], "argv[0]"),
        (["a\0b"], "argv[0]"),
        (["x", 1], "argv[1]"),
    ]:
        err = await error_of(client.call("process.exec", {"argv": argv}))
        assert (err.code, err.context["field"]) == ("VALIDATION_FAILED", field)
    err = await error_of(client.call("process.exec", {"argv": "ls -l"}))
    assert err.context["field"] == "argv"


# -- environment ----------------------------------------------------------------------------


async def test_environment_layers(spawn_daemon: Callable[..., Daemon]) -> None:
    d = spawn_daemon(env={"SUPERVISOR_TOKEN": "tok", "FROM_CONTAINER": "c", "GONE": "g"})
    show = py("import os, json; print(json.dumps(dict(os.environ)))")
    async with open_client(d.unix, token="tok") as c:
        await c.env.set({"SANDBOX": "s", "GONE": None, "OVERRIDE": "sandbox"})
        assert await c.env.get() == {"SANDBOX": "s", "GONE": None, "OVERRIDE": "sandbox"}
        p = await c.process.exec(show, env={"OVERRIDE": "launch", "LAUNCH": "l"})
        import json

        env = json.loads((await c.process.output(p["id"]))["stdout"])
        assert "SUPERVISOR_TOKEN" not in env and "tok" not in env.values()
        assert env["FROM_CONTAINER"] == "c" and "GONE" not in env
        assert env["SANDBOX"] == "s" and env["OVERRIDE"] == "launch" and env["LAUNCH"] == "l"
        assert env["SANDBOX_SUPERVISOR_PROCESS"] == p["id"]
        # A launch's env never changes later launches.
        p2 = await c.process.exec(show)
        env2 = json.loads((await c.process.output(p2["id"]))["stdout"])
        assert env2["OVERRIDE"] == "sandbox" and "LAUNCH" not in env2


@pytest.mark.parametrize(
    ("env", "name"),
    [({"": "x"}, ""), ({"A=B": "x"}, "A=B"), ({"A\0": "x"}, "A\0"), ({"OK": "a\0b"}, "OK")],
)
async def test_invalid_environment(client: Client, env: dict[str, str], name: str) -> None:
    err = await error_of(client.process.exec(["true"], env=env))
    assert err.code == "INVALID_PROCESS_ENVIRONMENT"
    assert err.context["name"] == name and err.context["reason"]
    err = await error_of(client.env.set(env))
    assert err.code == "INVALID_PROCESS_ENVIRONMENT"


async def test_path_is_searched_in_the_launch_environment(client: Client, daemon: Daemon) -> None:
    bindir = daemon.dir / "bin"
    bindir.mkdir(exist_ok=True)
    tool = bindir / "only-here"
    tool.write_text("#!/bin/sh\necho found-me\n")
    tool.chmod(0o755)
    assert (await error_of(client.process.exec(["only-here"]))).code == "PROCESS_SPAWN_FAILED"
    p = await client.process.exec(["only-here"], env={"PATH": f"{bindir}:/usr/bin:/bin"})
    assert (await client.process.output(p["id"]))["stdout"] == b"found-me\n"


# -- the child's world ----------------------------------------------------------------------


async def test_own_session_and_group_and_only_three_fds(client: Client) -> None:
    code = (
        "import os, json;"
        "fds = sorted(int(f) for f in os.listdir('/proc/self/fd'));"
        "print(json.dumps([os.getpid(), os.getpgid(0), os.getsid(0), fds]))"
    )
    p = await client.process.exec(py(code))
    import json

    pid, pgid, sid, fds = json.loads((await client.process.output(p["id"]))["stdout"])
    assert pid == p["pid"] == pgid == sid
    assert fds[:3] == [0, 1, 2] and len(fds) == 4  # the 4th is listdir's own directory fd


GLIBC_INTERNAL = (1 << 31) | (1 << 32)  # signals 32 and 33: see docs/processes.md


async def test_signal_mask_and_dispositions_are_defaults(client: Client) -> None:
    """The daemon ignores SIGPIPE (Python does); its children must not inherit that."""
    p = await client.process.exec(["grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"])
    lines = (await client.process.output(p["id"]))["stdout"].decode().split()
    assert lines[0::2] == ["SigBlk:", "SigIgn:"]
    assert int(lines[1], 16) == 0
    assert int(lines[3], 16) & ~GLIBC_INTERNAL == 0


# -- exit, groups, escapees -----------------------------------------------------------------


async def test_running_until_the_group_is_empty_and_root_exit_is_reported(
    client: Client,
) -> None:
    """The root exits 3 while a child lives on; a signal to that child alone changes nothing."""
    p = await client.process.exec(["sh", "-c", "sleep 300 & echo $!; exit 3"])
    ready = await client.process.wait_log(p["id"], r"^\d+")
    child = int(ready["match"])
    await wait_gone(p["pid"])
    snap = await client.process.get(p["id"])
    assert snap is not None and snap["state"] == "running"
    os.kill(child, signal.SIGKILL)
    exit = await client.process.wait_exit(p["id"], timeout_ms=10_000)
    assert exit == {"code": 3, "signal": None, "timed_out": False}
    snap = await client.process.get(p["id"])
    assert snap is not None and snap["state"] == "exited" and snap["exit"] == exit
    assert snap["ended_at"] >= snap["started_at"]


async def test_background_child_keeps_it_running_then_root_code(client: Client) -> None:
    with trio.fail_after(10):
        p = await client.process.exec(["sh", "-c", "sleep 0.5 & exit 3"])
        started = trio.current_time()
        assert (await client.process.wait_exit(p["id"]))["code"] == 3
        assert trio.current_time() - started >= 0.4


async def test_signal_death(client: Client) -> None:
    p = await client.process.exec(["sh", "-c", "kill -TERM $$"])
    assert await client.process.wait_exit(p["id"]) == {
        "code": 143,
        "signal": 15,
        "timed_out": False,
    }


async def test_setsid_escapee_does_not_hold_the_process_and_kill_reaches_it(
    client: Client,
) -> None:
    """Exit is not EOF: the escapee keeps stdout open, yet the process completes."""
    p = await client.process.exec(
        ["sh", "-c", "setsid sleep 300 & echo $!; echo done"],
    )
    with trio.fail_after(10):
        events = await collect(client, p["id"])
    assert events[-1]["type"] == "terminal" and events[-1]["exit"]["code"] == 0
    escapee = int(data_of(events, "stdout").split()[0])
    assert psutil.Process(escapee).status() != psutil.STATUS_ZOMBIE
    assert os.getpgid(escapee) != p["pid"]
    assert (await client.process.kill(p["id"], 9))["delivered"] >= 1
    await wait_gone(escapee)


async def test_a_member_that_leaves_the_group_late_does_not_hold_the_process(
    client: Client,
) -> None:
    """A group member that calls setsid after the root exited leaves without exiting: no
    kernel event says so, and the process must still complete."""
    p = await client.process.exec(["sh", "-c", "(sleep 0.5; exec setsid sleep 300) & echo $!"])
    with trio.fail_after(10):
        exit = await client.process.wait_exit(p["id"])
    assert exit["code"] == 0
    escapee = int((await client.process.output(p["id"]))["stdout"].split()[0])
    assert (await client.process.kill(p["id"], 9))["delivered"] >= 1
    await wait_gone(escapee)


async def test_double_fork_escapee_is_reached_by_the_lifetime(client: Client) -> None:
    script = "(setsid sh -c 'echo $$; exec sleep 300' &); sleep 300"
    p = await client.process.exec(["sh", "-c", script], timeout_ms=1000, kill_grace_ms=200)
    escapee = int((await client.process.wait_log(p["id"], r"^\d+"))["match"])
    exit = await client.process.wait_exit(p["id"], timeout_ms=10_000)
    assert exit["timed_out"] is True and exit["signal"] == 15
    await wait_gone(escapee)


IGNORE_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    "print('ready', flush=True); time.sleep(300)"
)


async def test_term_ignoring_descendant_ends_by_the_lifetime(client: Client) -> None:
    script = f'{PY} -c "{IGNORE_TERM}" & wait'
    p = await client.process.exec(["sh", "-c", script], timeout_ms=2000, kill_grace_ms=300)
    await client.process.wait_log(p["id"], "ready")
    # TERM ends the root shell but not the descendant: still running.
    await client.process.kill(p["id"], 15)
    await wait_gone(p["pid"])
    snap = await client.process.get(p["id"])
    assert snap is not None and snap["state"] == "running"
    exit = await client.process.wait_exit(p["id"], timeout_ms=10_000)
    assert exit == {"code": 143, "signal": 15, "timed_out": True}


async def test_lifetime_timeout(client: Client) -> None:
    p = await client.process.exec(["sleep", "300"], timeout_ms=200)
    exit = await client.process.wait_exit(p["id"], timeout_ms=10_000)
    assert exit == {"code": 143, "signal": 15, "timed_out": True}
    out = await client.process.output(p["id"])
    assert out["timed_out"] is True and out["signal"] == 15


async def test_lifetime_escalates_to_sigkill(client: Client) -> None:
    p = await client.process.exec(py(IGNORE_TERM), timeout_ms=300, kill_grace_ms=100)
    exit = await client.process.wait_exit(p["id"], timeout_ms=10_000)
    assert exit == {"code": 137, "signal": 9, "timed_out": True}


async def test_kill_reaches_the_whole_group(client: Client) -> None:
    p = await client.process.exec(["sh", "-c", "sleep 300 & echo $!; sleep 300 & echo $!; wait"])
    pids = []
    while len(pids) < 2:
        found = await client.process.wait_log(p["id"], r"\d+\n\d+")
        pids = [int(x) for x in found["match"].split()]
    assert (await client.process.kill(p["id"], 9))["delivered"] >= 1
    assert (await client.process.wait_exit(p["id"]))["signal"] == 9
    for pid in pids:
        await wait_gone(pid)


@pytest.mark.parametrize("bad", ["TERM", 0, 65, -1, 1.5, None])
async def test_kill_signal_must_be_a_number_1_to_64(client: Client, bad: object) -> None:
    p = await client.process.exec(["sleep", "300"])
    err = await error_of(client.call("process.kill", {"id": p["id"], "signal": bad}))
    assert (err.code, err.context["field"]) == ("VALIDATION_FAILED", "signal")
    await client.process.kill(p["id"], 9)


async def test_orphans_are_reaped(client: Client, daemon: Daemon) -> None:
    p = await client.process.exec(["sh", "-c", "(sh -c 'exit 0' &) ; (true &); exit 0"])
    await client.process.wait_exit(p["id"])
    await poll_until(lambda: not zombie_children(daemon.proc.pid))


# -- lookups --------------------------------------------------------------------------------


async def test_lookups_unknown_and_stale(client: Client, daemon: Daemon) -> None:
    other = "0000000000000000" if daemon.instance != "0000000000000000" else "1111111111111111"
    stale = f"proc-{other}-1"
    unknown = f"proc-{daemon.instance}-999999"
    for pid in (stale, unknown, "garbage"):
        assert await client.process.get(pid) is None
    for call in (
        lambda i: client.process.kill(i),
        lambda i: client.process.wait_exit(i),
        lambda i: client.process.output(i),
        lambda i: client.process.wait_log(i, "x"),
    ):
        assert (await error_of(call(stale))).code == "STALE_PROCESS_HANDLE"
        assert (await error_of(call(unknown))).code == "PROCESS_NOT_FOUND"
        assert (await error_of(call("garbage"))).code == "PROCESS_NOT_FOUND"
    err = await error_of(collect(client, stale))
    assert err.code == "STALE_PROCESS_HANDLE" and err.context["process_id"] == stale


async def test_list_keeps_running_and_bounds_finished(client: Client) -> None:
    sleeper = await client.process.exec(["sleep", "300"])
    for _ in range(270):
        p = await client.process.exec(["true"])
        await client.process.wait_exit(p["id"])
    listed = await client.process.list()
    finished = [x for x in listed if x["state"] != "running"]
    assert len(finished) == 256
    assert sleeper["id"] in {x["id"] for x in listed}
    assert [x["id"] for x in listed] == sorted(
        (x["id"] for x in listed), key=lambda i: int(i.rsplit("-", 1)[1])
    )
    await client.process.kill(sleeper["id"], 9)


async def test_a_pipe_that_fills_grows_and_a_quiet_one_does_not(client: Client) -> None:
    """The child asks its own stdout how big the pipe is, after writing: a heavy writer's
    pipe has grown (bigger reads, fewer wake-ups), a quiet one keeps the kernel default."""
    ask = "import fcntl, sys; sys.stderr.write(str(fcntl.fcntl(1, 1032)))"  # F_GETPIPE_SZ
    heavy = await client.process.exec(
        py(f"import os\nfor _ in range(8): os.write(1, bytes(1 << 20))\n{ask}")
    )
    quiet = await client.process.exec(py(f"print('hi')\n{ask}"))
    sizes = {}
    for name, p in (("heavy", heavy), ("quiet", quiet)):
        out = await client.process.output(p["id"], timeout_ms=20_000)
        assert out["exit_code"] == 0, out
        sizes[name] = int(out["stderr"])
    assert sizes == {"heavy": 256 * 1024, "quiet": 64 * 1024}
