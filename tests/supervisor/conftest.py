"""A real daemon in a subprocess, started on fresh sockets, and clients for it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from supervisor.client import Client, open_client

START_TIMEOUT = 20.0


@dataclass
class Daemon:
    proc: subprocess.Popen[str]
    dir: Path
    socket: str
    tcp: str | None
    instance: str
    log: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None
    #: The HTTP front (`http:127.0.0.1:PORT`), when it listens.
    http: str | None = None

    @property
    def unix(self) -> str:
        return f"unix:{self.socket}"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("daemon did not stop in time:\n" + self.log_text()) from None
        finally:
            self.close()

    def close(self) -> None:
        if self.reader is not None:
            self.reader.join(10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()

    def wait(self, timeout: float = 15.0) -> int:
        """The exit code of a daemon already told to stop."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("daemon did not exit in time:\n" + self.log_text()) from None
        finally:
            self.close()

    def log_text(self) -> str:
        return "".join(self.log)


def launch_daemon(
    *extra: str,
    env: dict[str, str] | None = None,
    tcp: str | None = "tcp:127.0.0.1:0",
    http: str | None = "http:127.0.0.1:0",
    expect_ready: bool = True,
) -> Daemon:
    """Start `supervisor serve` and wait for its readiness line (not a sleep)."""
    workdir = Path(tempfile.mkdtemp(prefix="sv-", dir="/tmp"))  # short: Unix paths max 108
    sock = str(workdir / "d.sock")
    args = [sys.executable, "-m", "supervisor", "serve", "--listen", f"unix:{sock}"]
    if tcp:
        args += ["--listen", tcp]
    if http:
        args += ["--listen", http]
    args += ["--workspace", str(workdir / "ws"), *extra]
    proc = subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.stderr is not None
    log: list[str] = []
    ready = threading.Event()
    found: dict[str, str] = {}

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            log.append(line)
            for scheme in ("tcp", "http"):
                if f"listening on {scheme}:" in line:
                    found[scheme] = line.rsplit("listening on ", 1)[1].strip()
            if "ready: instance " in line:
                found["instance"] = line.split("ready: instance ")[1].split(",")[0]
                ready.set()
        ready.set()

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    daemon = Daemon(proc, workdir, sock, None, "", log, reader)
    if not expect_ready:
        return daemon
    if not ready.wait(START_TIMEOUT) or "instance" not in found:
        proc.kill()
        proc.wait()
        daemon.close()
        raise AssertionError("daemon did not become ready:\n" + "".join(log))
    daemon.tcp = found.get("tcp")
    daemon.http = found.get("http")
    daemon.instance = found["instance"]
    return daemon


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    """One daemon shared by the tests that do not need their own configuration."""
    d = launch_daemon()
    yield d
    code = d.stop()
    assert code == 0, d.log_text()
    shutil.rmtree(d.dir, ignore_errors=True)


@pytest.fixture
def spawn_daemon() -> Iterator[Callable[..., Daemon]]:
    """Start daemons with their own options; each is stopped and checked at teardown."""
    started: list[Daemon] = []

    def spawn(*extra: str, **kwargs: object) -> Daemon:
        d = launch_daemon(*extra, **kwargs)  # type: ignore[arg-type]
        started.append(d)
        return d

    yield spawn
    for d in started:
        d.stop()
        shutil.rmtree(d.dir, ignore_errors=True)


@pytest.fixture(params=["unix", "websocket"])
async def client(daemon: Daemon, request: pytest.FixtureRequest) -> AsyncIterator[Client]:
    """A client of the shared daemon, once over its Unix socket and once over a WebSocket
    to its HTTP front: every test that uses it holds for both transports."""
    address = daemon.unix if request.param == "unix" else str(daemon.http)
    async with open_client(address) as c:
        yield c
    # Whatever the test did, the shared daemon must still be up and answering.
    assert daemon.proc.poll() is None, daemon.log_text()
    async with open_client(daemon.unix) as check:
        await check.call("runtime.ping")


@pytest.fixture
def ws(daemon: Daemon) -> Iterator[Path]:
    """A fresh directory inside the shared daemon's workspace, removed afterwards."""
    path = daemon.dir / "ws" / f"t-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=True)
