"""Stopping the daemon stops everything it supervises."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest

from protocol import SupervisorError
from supervisor.client import open_client

from .conftest import Daemon
from .procs import PY, is_gone, poll_until
from .test_processes import IGNORE_TERM


async def test_sigterm_ends_every_process_tree_and_answers_waits(
    spawn_daemon: Callable[..., Daemon],
) -> None:
    d = spawn_daemon("--stop-grace", "2")
    async with open_client(d.unix) as c:
        tree = await c.process.exec(
            ["sh", "-c", "sleep 300 & echo $!; setsid sleep 300 & echo $!; wait"]
        )
        found = await c.process.wait_log(tree["id"], r"\d+\n\d+\n")
        pids = [tree["pid"], *map(int, found["match"].split())]
        stubborn = await c.process.exec([PY, "-c", IGNORE_TERM])
        await c.process.wait_log(stubborn["id"], "ready")
        pids.append(stubborn["pid"])

        async def wait_it() -> None:
            with pytest.raises(SupervisorError) as info:
                await c.process.wait_exit(tree["id"])
            assert info.value.code in ("SHUTTING_DOWN", "RPC_TRANSPORT_ERROR")

        import trio

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_it)
            await trio.testing.wait_all_tasks_blocked()
            d.proc.send_signal(signal.SIGTERM)
    assert d.wait() == 0, d.log_text()
    for pid in pids:
        assert is_gone(pid), f"pid {pid} outlived the daemon"


async def test_new_requests_during_shutdown_get_shutting_down(
    spawn_daemon: Callable[..., Daemon],
) -> None:
    d = spawn_daemon("--stop-grace", "3")
    async with open_client(d.unix) as c:
        p = await c.process.exec([PY, "-c", IGNORE_TERM])
        await c.process.wait_log(p["id"], "ready")
        d.proc.send_signal(signal.SIGTERM)
        # The daemon is waiting out the grace for the stubborn process: it answers, refusing.
        with pytest.raises(SupervisorError) as info:
            for _ in range(1000):
                await c.call("runtime.ping")
        assert info.value.code in ("SHUTTING_DOWN", "RPC_TRANSPORT_ERROR")
    assert d.wait() == 0, d.log_text()
    await poll_until(lambda: is_gone(p["pid"]))
