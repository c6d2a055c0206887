"""`supervisor cat/ls/cp/watch` as a person uses them, over Unix and TCP."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import Daemon
from .test_cli import cli


def test_cp_in_and_out_over_tcp_and_cat(daemon: Daemon, ws: Path, tmp_path: Path) -> None:
    local = tmp_path / "report.bin"
    payload = os.urandom(3 * 1024 * 1024 + 17)  # several upload chunks
    local.write_bytes(payload)
    local.chmod(0o640)
    connect = ["--connect", str(daemon.tcp)]
    out = cli("cp", *connect, str(local), f":{ws.name}/")
    assert out.returncode == 0, out.stderr
    assert (ws / "report.bin").read_bytes() == payload
    assert (ws / "report.bin").stat().st_mode & 0o777 == 0o640

    back = tmp_path / "back"
    back.mkdir()
    out = cli("cp", *connect, f":{ws.name}/report.bin", str(back))
    assert out.returncode == 0, out.stderr
    assert (back / "report.bin").read_bytes() == payload
    assert sorted(p.name for p in back.iterdir()) == ["report.bin"]  # no partial file left

    cat = subprocess.run(
        [sys.executable, "-m", "supervisor", "cat", *connect, f"{ws.name}/report.bin"],
        capture_output=True,
        timeout=30,
    )
    assert cat.returncode == 0 and cat.stdout == payload


def test_cp_errors_are_one_line(daemon: Daemon, ws: Path, tmp_path: Path) -> None:
    out = cli("cp", "--connect", daemon.unix, str(tmp_path), str(tmp_path / "x"))
    assert out.returncode == 1 and "[VALIDATION_FAILED]" in out.stderr
    out = cli("cp", "--connect", daemon.unix, f":{ws.name}/missing", str(tmp_path))
    assert out.returncode == 1 and "[FILE_NOT_FOUND]" in out.stderr
    out = cli("cat", "--connect", daemon.unix, ws.name)
    assert out.returncode == 1 and "[IS_A_DIRECTORY]" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_ls(daemon: Daemon, ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "src/app.py").write_bytes(b"x" * 42)
    (ws / ".hidden").write_bytes(b"")
    out = cli("ls", "--connect", daemon.unix, ws.name)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith("drwx") and out.stdout.endswith("src/\n")
    out = cli("ls", "--connect", daemon.unix, "-R", "-a", ws.name)
    lines = out.stdout.splitlines()
    assert [line.split()[-1] for line in lines] == [".hidden", "src/", "src/app.py"]
    assert lines[-1].split()[1] == "42"


def test_watch_prints_events(daemon: Daemon, ws: Path) -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "supervisor", "watch", "--connect", daemon.unix, ws.name],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stderr is not None and proc.stdout is not None
            assert proc.stderr.readline().startswith("watching ")  # the watch is active now
            (ws / "new.txt").write_text("hi")
            assert proc.stdout.readline().split() == ["create", str(ws / "new.txt")]
        finally:
            proc.terminate()
            proc.wait(10)
