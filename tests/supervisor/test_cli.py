"""The command line as a person uses it: real processes, real daemon."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from supervisor.client import open_client

from .conftest import Daemon, launch_daemon


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
    )


def test_ping_and_info(daemon: Daemon) -> None:
    out = cli("ping", "--connect", daemon.unix)
    assert out.returncode == 0, out.stderr
    assert daemon.instance in out.stdout and out.stdout.startswith("pong from sandbox-supervisor/")
    out = cli("ping", "--json", "--connect", str(daemon.tcp))
    assert json.loads(out.stdout)["instance"] == daemon.instance
    out = cli("info", "--connect", daemon.unix)
    assert out.returncode == 0 and f"instance:          {daemon.instance}" in out.stdout
    info = json.loads(cli("info", "--json", "--connect", daemon.unix).stdout)
    assert info["pid"] == daemon.proc.pid


def test_address_from_environment(daemon: Daemon) -> None:
    out = cli("ping", env={"SUPERVISOR_ADDRESS": daemon.unix})
    assert out.returncode == 0 and daemon.instance in out.stdout


def test_no_daemon_is_one_line_and_nonzero(tmp_path: Path) -> None:
    out = cli("ping", "--connect", f"unix:{tmp_path}/none.sock")
    assert out.returncode != 0
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "cannot connect" in out.stderr
    out = cli("info", "--connect", "tcp:127.0.0.1:1")
    assert out.returncode != 0 and out.stderr.count("\n") == 1


def test_bad_address_is_a_usage_error() -> None:
    out = cli("ping", "--connect", "carrier-pigeon:home")
    assert out.returncode == 2 and "unknown scheme" in out.stderr


def test_token_for_the_cli(spawn_daemon: Callable[..., Daemon], tmp_path: Path) -> None:
    d = spawn_daemon(env={"SUPERVISOR_TOKEN": "t0ken"})
    out = cli("ping", "--connect", str(d.tcp))
    assert out.returncode == 1 and "UNAUTHORIZED" in out.stderr
    assert cli("ping", "--connect", str(d.tcp), env={"SUPERVISOR_TOKEN": "t0ken"}).returncode == 0
    token_file = tmp_path / "tok"
    token_file.write_text("t0ken\n")
    assert cli("ping", "--connect", str(d.tcp), "--token-file", str(token_file)).returncode == 0


def test_refuses_exposed_tcp_without_a_token(tmp_path: Path) -> None:
    out = cli("serve", "--listen", f"unix:{tmp_path}/s.sock", "--listen", "tcp:0.0.0.0:0")
    assert out.returncode == 2
    assert "refusing to listen on tcp:0.0.0.0:0 without a token" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "s.sock").exists()


def test_exposed_tcp_with_a_token_starts(spawn_daemon: Callable[..., Daemon]) -> None:
    d = spawn_daemon(tcp="tcp:0.0.0.0:0", env={"SUPERVISOR_TOKEN": "x"})
    assert d.tcp is not None and d.tcp.startswith("tcp:0.0.0.0:")


def test_socket_is_private(daemon: Daemon) -> None:
    mode = os.stat(daemon.socket).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600


def test_stale_socket_is_replaced_and_live_one_is_not_stolen(tmp_path: Path) -> None:
    first = launch_daemon()
    try:
        # A live daemon's socket is not stolen: the second start fails clearly.
        out = cli("serve", "--listen", first.unix)
        assert out.returncode == 2 and "already listening" in out.stderr
        assert first.proc.poll() is None
        first.proc.send_signal(signal.SIGKILL)  # dies without cleaning up
        first.proc.wait()
        assert os.path.exists(first.socket)
        # Nobody answers on the leftover file: a new daemon takes it over.
        second = launch_daemon("--listen", first.unix, tcp=None)
        try:
            assert "removing stale socket" in second.log_text()
        finally:
            assert second.stop() == 0
    finally:
        first.close()


def test_non_socket_file_is_never_replaced(tmp_path: Path) -> None:
    precious = tmp_path / "data.sock"
    precious.write_text("keep me")
    out = cli("serve", "--listen", f"unix:{precious}")
    assert out.returncode == 2 and "not a socket" in out.stderr
    assert precious.read_text() == "keep me"


async def test_sigterm_stops_cleanly_and_removes_the_socket() -> None:
    d = launch_daemon()
    async with open_client(d.unix) as c:
        await c.call("runtime.ping")
        assert d.stop(signal.SIGTERM) == 0
    assert not Path(d.socket).exists()  # noqa: ASYNC240 - the daemon has exited
    assert "shutting down: received SIGTERM" in d.log_text()
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        assert d.tcp is not None
        port = int(d.tcp.rsplit(":", 1)[1])
        assert probe.connect_ex(("127.0.0.1", port)) != 0
    finally:
        probe.close()


def test_sigint_stops_cleanly() -> None:
    d = launch_daemon()
    assert d.stop(signal.SIGINT) == 0
    assert not os.path.exists(d.socket)


def test_python_dash_m_and_version() -> None:
    out = cli("--version")
    assert out.returncode == 0 and out.stdout.startswith("sandbox-supervisor/")
