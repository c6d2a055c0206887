"""`supervisor exec/ps/logs/kill/wait` as a person uses them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from .conftest import Daemon
from .test_cli import cli


def test_exec_streams_bytes_and_exits_with_the_code(daemon: Daemon) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "supervisor",
            "exec",
            "--connect",
            daemon.unix,
            "--",
            "sh",
            "-c",
            "printf 'a\\000b\\377'; printf 'err' >&2; exit 7",
        ],
        capture_output=True,
        timeout=30,
    )
    assert out.returncode == 7
    assert out.stdout == b"a\x00b\xff"
    assert out.stderr == b"err"


def test_exec_signal_death_is_128_plus_n(daemon: Daemon) -> None:
    out = cli("exec", "--connect", daemon.unix, "--", "sh", "-c", "kill -KILL $$")
    assert out.returncode == 137


def test_exec_options(daemon: Daemon) -> None:
    (daemon.dir / "ws" / "d").mkdir(exist_ok=True)
    out = cli(
        "exec",
        "--connect",
        daemon.unix,
        "--cwd",
        "d",
        "--env",
        "X=1=2",
        "--",
        "sh",
        "-c",
        'echo "$PWD $X"',
    )
    assert out.returncode == 0 and out.stdout == f"{daemon.dir}/ws/d 1=2\n"
    out = cli("exec", "--connect", daemon.unix, "--timeout", "0.2", "--", "sleep", "30")
    assert out.returncode == 143
    out = cli("exec", "--connect", daemon.unix, "--", "no-such-program-here")
    assert out.returncode == 1 and "PROCESS_SPAWN_FAILED" in out.stderr
    assert out.stderr.count("\n") == 1


def test_detach_ps_logs_kill_wait(daemon: Daemon) -> None:
    out = cli(
        "exec", "--connect", daemon.unix, "--detach", "--", "sh", "-c", "echo hello; exec sleep 300"
    )
    process_id = out.stdout.strip()
    assert out.returncode == 0 and process_id.startswith("proc-")
    ps = cli("ps", "--connect", daemon.unix)
    assert process_id in ps.stdout and "running" in ps.stdout and "sleep 300" in ps.stdout
    listed = json.loads(cli("ps", "--json", "--connect", daemon.unix).stdout)
    assert any(p["id"] == process_id for p in listed)
    logs = cli("logs", "--connect", daemon.unix, process_id)
    assert logs.returncode == 0 and logs.stdout == "hello\n"
    assert cli("kill", "--connect", daemon.unix, process_id, "-s", "TERM").returncode == 0
    waited = cli("wait", "--connect", daemon.unix, process_id)
    assert waited.returncode == 143
    follow = cli("logs", "--connect", daemon.unix, "-f", process_id)
    assert follow.stdout == "hello\n"
    bad = cli("kill", "--connect", daemon.unix, process_id, "-s", "NOPE")
    assert bad.returncode == 1 and "unknown signal" in bad.stderr


def test_logs_since_cursor(daemon: Daemon) -> None:
    out = cli("exec", "--connect", daemon.unix, "--detach", "--", "sh", "-c", "echo one; echo two")
    process_id = out.stdout.strip()
    cli("wait", "--connect", daemon.unix, process_id)
    cursor = f"{process_id}:4"
    assert cli("logs", "--connect", daemon.unix, "--since", cursor, process_id).stdout == "two\n"


def test_ctrl_c_is_forwarded_as_sigint(daemon: Daemon) -> None:
    script = "trap 'echo got-INT; exit 5' INT; echo ready; while :; do sleep 0.05; done"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "supervisor",
            "exec",
            "--connect",
            daemon.unix,
            "--",
            "sh",
            "-c",
            script,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline() == "ready\n"
        os.kill(proc.pid, signal.SIGINT)
        rest = proc.stdout.read()
        assert proc.wait(30) == 5
        assert "got-INT" in rest
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
