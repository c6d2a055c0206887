"""PID-1 duties, black-box: the daemon runs as PID 1 of a fresh PID namespace (as a container
runtime starts it) while pytest watches from outside."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import trio

from supervisor.client import open_client

from .conftest import Daemon
from .procs import PY


def _namespaces_work() -> str | None:
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True
    )
    return None if probe.returncode == 0 else f"cannot create a PID namespace: {probe.stderr}"


NO_NAMESPACES = _namespaces_work() if shutil.which("unshare") else "unshare is not installed"
needs_pid_namespace = pytest.mark.skipif(NO_NAMESPACES is not None, reason=str(NO_NAMESPACES))


class Pid1:
    """The daemon as PID 1 in its own PID namespace, its stdout read line by line."""

    def __init__(self, main: list[str], *options: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="pid1-", dir="/tmp"))
        self.socket = str(self.dir / "d.sock")
        argv = [
            "unshare", "--pid", "--fork", "--mount-proc",
            PY, "-m", "supervisor", "serve", "--listen", f"unix:{self.socket}",
            "--workspace", str(self.dir / "ws"), *options, "--", *main,
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.output = b""
        self.log: list[bytes] = []
        threading.Thread(
            target=self._read, args=(self.proc.stdout, self.lines), daemon=True
        ).start()
        threading.Thread(target=self._read_log, daemon=True).start()

    @staticmethod
    def _read(stream: object, into: queue.Queue[bytes]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            into.put(line)

    def _read_log(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)

    def expect(self, pattern: bytes, timeout: float = 15.0) -> re.Match[bytes]:
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while (match := regex.search(self.output)) is None:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"never saw {pattern!r}; output {self.output!r}; log {self.log}"
            with contextlib.suppress(queue.Empty):
                self.output += self.lines.get(timeout=remaining)
        return match

    @property
    def pid(self) -> int:
        """The daemon's pid as seen from outside: the child of `unshare`."""
        deadline = time.monotonic() + 10
        while not (children := psutil.Process(self.proc.pid).children()):
            assert time.monotonic() < deadline, "the daemon never started"
            time.sleep(0.01)
        return children[0].pid

    def wait(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            # Killing `unshare` would leave the namespace's PID 1 running: kill the daemon
            # itself, and the kernel then kills everything else in its namespace.
            for child in psutil.Process(self.proc.pid).children():
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def pid1() -> Iterator[type[Pid1]]:
    started: list[Pid1] = []

    class Tracked(Pid1):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            started.append(self)

    yield Tracked
    for p in started:
        p.close()


def zombies_under(pid: int) -> int:
    """Zombie children of `pid`, read from the state field of every /proc/*/stat."""
    count = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            raw = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        state, ppid = raw[raw.rfind(b")") + 2 :].split()[:2]
        if state == b"Z" and int(ppid) == pid:
            count += 1
    return count


ORPHANS = "for i in $(seq 100); do (sh -c 'exit 0' &); done; echo spawned; exec sleep 300"


def assert_no_zombies_remain(pid: int) -> None:
    deadline = time.monotonic() + 10
    while zombies_under(pid):
        assert time.monotonic() < deadline, f"{zombies_under(pid)} zombies remain under {pid}"
        time.sleep(0.01)


@needs_pid_namespace
def test_pid1_reaps_100_orphaned_grandchildren(pid1: type[Pid1]) -> None:
    daemon = pid1(["sh", "-c", ORPHANS])
    daemon.expect(rb"spawned\n")
    assert_no_zombies_remain(daemon.pid)
    assert any(b"running as PID 1" in line for line in daemon.log)
    os.kill(daemon.pid, signal.SIGTERM)
    assert daemon.wait() == 143  # `sleep`, the main command, died of the forwarded SIGTERM


@needs_pid_namespace
def test_negative_control_a_pid1_that_does_not_reap_leaves_zombies() -> None:
    """Shows the zombie check can fail: a PID 1 that never waits keeps all 100."""
    never_reaps = (
        f"import subprocess, time; subprocess.Popen(['sh', '-c', {ORPHANS!r}]); time.sleep(300)"
    )
    proc = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", PY, "-c", never_reaps])
    inner = None
    try:
        deadline = time.monotonic() + 10
        while not (children := psutil.Process(proc.pid).children()):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        inner = children[0].pid
        while zombies_under(inner) < 100:
            assert time.monotonic() < deadline, f"only {zombies_under(inner)} zombies seen"
            time.sleep(0.01)
    finally:
        if inner is not None:
            os.kill(inner, signal.SIGKILL)  # the namespace's PID 1: its end ends them all
        proc.kill()
        proc.wait()


def test_subreaper_mode_reaps_100_orphans(daemon: Daemon) -> None:
    assert "not PID 1: became a child subreaper" in daemon.log_text()

    async def run() -> None:
        async with open_client(daemon.unix) as c:
            p = await c.process.exec(["sh", "-c", ORPHANS])
            await c.process.wait_log(p["id"], "spawned")
            await trio.to_thread.run_sync(assert_no_zombies_remain, daemon.proc.pid)
            await c.process.kill(p["id"], 9)

    trio.run(run)


@needs_pid_namespace
@pytest.mark.parametrize(("script", "code"), [
    ("exit 0", 0), ("exit 1", 1), ("exit 2", 2), ("exit 127", 127), ("exit 255", 255),
    ("kill -KILL $$", 137),
])  # fmt: skip
def test_main_command_exit_code_is_the_daemons(pid1: type[Pid1], script: str, code: int) -> None:
    daemon = pid1(["sh", "-c", f"echo main-ran; {script}"])
    assert daemon.wait() == code
    daemon.expect(rb"main-ran\n")  # its output reached the daemon's own stdout


@needs_pid_namespace
def test_missing_main_command_is_127(pid1: type[Pid1]) -> None:
    daemon = pid1(["no-such-program-anywhere"])
    assert daemon.wait() == 127


SIGNAL_PRINTER = """
import signal, sys
def seen(signum, frame):
    print("got", signal.Signals(signum).name, flush=True)
    if signum in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM):
        sys.exit(0)
for s in ("SIGHUP", "SIGUSR1", "SIGUSR2", "SIGWINCH", "SIGINT", "SIGQUIT", "SIGTERM"):
    signal.signal(getattr(signal, s), seen)
print("ready", flush=True)
while True:
    signal.pause()
"""


@needs_pid_namespace
@pytest.mark.parametrize("stop_signal", ["SIGINT", "SIGQUIT", "SIGTERM"])
def test_signals_are_forwarded_to_the_main_command(pid1: type[Pid1], stop_signal: str) -> None:
    daemon = pid1([PY, "-c", SIGNAL_PRINTER])
    daemon.expect(rb"ready\n")
    for name in ("SIGHUP", "SIGUSR1", "SIGUSR2", "SIGWINCH"):
        os.kill(daemon.pid, getattr(signal, name))
        daemon.expect(f"got {name}\n".encode())
    os.kill(daemon.pid, getattr(signal, stop_signal))
    daemon.expect(f"got {stop_signal}\n".encode())
    assert daemon.wait() == 0  # the main command exited 0 on it; so does the daemon


IGNORING_TREE = (
    "trap '' TERM; "
    f'{PY} -c "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); '
    "print('ready', flush=True); time.sleep(300)\" & wait"
)


@needs_pid_namespace
def test_sigterm_with_a_term_ignoring_tree_ends_within_the_grace(pid1: type[Pid1]) -> None:
    daemon = pid1(["sh", "-c", IGNORING_TREE], "--stop-grace", "1")
    daemon.expect(rb"ready\n")
    started = time.monotonic()
    os.kill(daemon.pid, signal.SIGTERM)
    assert daemon.wait() == 137  # the main command was SIGKILLed after the grace
    assert time.monotonic() - started < 1 + 8  # the grace plus a generous margin


@needs_pid_namespace
def test_second_sigterm_skips_the_grace(pid1: type[Pid1]) -> None:
    daemon = pid1(["sh", "-c", IGNORING_TREE], "--stop-grace", "60")
    daemon.expect(rb"ready\n")
    os.kill(daemon.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while not any(b"shutting down" in line for line in daemon.log):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(daemon.pid, signal.SIGTERM)
    assert daemon.wait(timeout=15) == 137  # well before the 60 s grace


@needs_pid_namespace
def test_rpc_stays_responsive_while_reaping_under_load(pid1: type[Pid1]) -> None:
    churn = "echo churning; while :; do (true &); done"
    daemon = pid1(["sh", "-c", churn])
    daemon.expect(rb"churning\n")

    async def pings() -> float:
        worst = 0.0
        async with open_client(f"unix:{daemon.socket}") as c:
            for _ in range(50):
                started = trio.current_time()
                with trio.fail_after(5):
                    await c.call("runtime.ping")
                worst = max(worst, trio.current_time() - started)
                info = await c.call("runtime.info")
                assert info["pid1"] is True
        return worst

    worst = trio.run(pings)
    assert worst < 5
    os.kill(daemon.pid, signal.SIGTERM)
    assert daemon.wait() == 143
    assert zombies_under(daemon.proc.pid) == 0


def test_children_are_more_killable_than_the_daemon(daemon: Daemon) -> None:
    own = int(Path(f"/proc/{daemon.proc.pid}/oom_score_adj").read_text())

    async def run() -> int:
        # Read from outside once exec has answered: the value is written right after the
        # spawn, so a child reading its own could race the write (documented).
        async with open_client(daemon.unix) as c:
            p = await c.process.exec(["sleep", "30"])
            value = int(await trio.Path(f"/proc/{p['pid']}/oom_score_adj").read_text())
            await c.process.kill(p["id"], 9)
            return value

    assert trio.run(run) == min(1000, own + 300)
