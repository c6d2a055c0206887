"""Scale and hygiene: many processes, nothing left behind."""

from __future__ import annotations

import os
import signal

import psutil
import trio

from protocol import SupervisorError
from supervisor.client import Client

from .conftest import Daemon
from .procs import poll_until, zombie_children


async def test_1000_sequential_execs_leave_no_zombie_fd_or_memory_growth(
    client: Client, daemon: Daemon
) -> None:
    me = psutil.Process(daemon.proc.pid)
    # Warm up, so lazily built things (imports, caches, retention) are in the baseline.
    for _ in range(300):
        p = await client.process.exec(["true"])
        await client.process.wait_exit(p["id"])
    fds, rss = me.num_fds(), me.memory_info().rss
    for i in range(1000):
        p = await client.process.exec(["sh", "-c", f"exit {i % 256}"])
        exit = await client.process.wait_exit(p["id"])
        assert exit["code"] == i % 256  # statuses are never confused, pids get reused
    await poll_until(lambda: not zombie_children(daemon.proc.pid))
    assert me.num_fds() == fds
    assert me.memory_info().rss - rss < 8 * 1024 * 1024


async def test_1000_live_processes(client: Client, daemon: Daemon) -> None:
    me = psutil.Process(daemon.proc.pid)
    rss_before = me.memory_info().rss
    ids = []
    with trio.fail_after(120):
        for _ in range(1000):
            ids.append((await client.process.exec(["sleep", "300"]))["id"])
        started = trio.current_time()
        listed = await client.process.list()
        list_seconds = trio.current_time() - started
        running = {p["id"] for p in listed if p["state"] == "running"}
        assert set(ids) <= running
        # Rings take memory as data arrives: 1,000 silent processes cost little.
        assert me.memory_info().rss - rss_before < 150 * 1024 * 1024
        assert list_seconds < 5  # a sanity bound, not the benchmark (bench/ measures it)
        # Killed here (process.kill has its own tests); the daemon must settle them all.
        for p in listed:
            if p["id"] in ids:
                os.kill(p["pid"], signal.SIGKILL)
        for process_id in ids:
            try:
                assert (await client.process.wait_exit(process_id))["signal"] == 9
            except SupervisorError as exc:
                # Only the newest 256 finished processes are retained; older ones are gone.
                assert exc.code == "PROCESS_NOT_FOUND"
        listed = await client.process.list()
        assert not any(p["state"] == "running" for p in listed if p["id"] in ids)
        assert len([p for p in listed if p["id"] in ids]) == 256
    await poll_until(lambda: not zombie_children(daemon.proc.pid))
