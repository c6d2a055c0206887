"""Port readiness, listing and watching."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import uuid

import pytest
import trio

from protocol import SupervisorError
from supervisor.client import Client, open_client

from .conftest import Daemon
from .procs import py
from .test_cli import cli


async def error_of(awaitable: object) -> SupervisorError:
    with pytest.raises(SupervisorError) as info:
        await awaitable  # type: ignore[misc]
    return info.value


def free_port(family: int = socket.AF_INET) -> int:
    with socket.socket(family) as s:
        s.bind(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0))
        return int(s.getsockname()[1])


def gated_server(gate: str, host: str, port: int, *, v6only: bool = False) -> list[str]:
    """A child that listens on host:port only once the test opens the gate (a FIFO)."""
    family = "socket.AF_INET6" if ":" in host else "socket.AF_INET"
    extra = "s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1);" if v6only else ""
    return py(
        f"import socket, time; open({gate!r}).read();"
        f"s = socket.socket({family}); {extra}"
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1);"
        f"s.bind(({host!r}, {port})); s.listen(); print('listening', flush=True);"
        "\nwhile True: s.accept()[0].close()"
    )


def make_gate(daemon: Daemon, name: str) -> str:
    path = str(daemon.dir / f"gate-{name}-{uuid.uuid4().hex[:8]}")
    os.mkfifo(path)
    return path


async def open_gate(path: str) -> None:
    await trio.to_thread.run_sync(lambda: open(path, "w").close())


@pytest.mark.parametrize(
    ("host", "v6only"),
    [("0.0.0.0", False), ("127.0.0.1", False), ("::", False), ("::", True), ("::1", False)],
)
async def test_readiness_is_noticed_without_waiting_for_the_interval(
    client: Client, daemon: Daemon, host: str, v6only: bool
) -> None:
    """interval_ms is an hour: only a watch of the kernel's table can notice in time."""
    port = free_port(socket.AF_INET6 if ":" in host else socket.AF_INET)
    gate = make_gate(daemon, f"{port}")
    p = await client.process.exec(gated_server(gate, host, port, v6only=v6only))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(open_gate, gate)
        with trio.fail_after(10):
            result = await client.call(
                "process.wait_port", {"id": p["id"], "port": port, "interval_ms": 3_600_000}
            )
    assert result["port"] == port and result["mode"] == "tcp" and result["elapsed_ms"] >= 0
    await client.process.kill(p["id"], 9)


async def test_http_503_then_200(client: Client, daemon: Daemon) -> None:
    port = free_port()
    server = (
        "import http.server, sys\n"
        "count = 0\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        global count; count += 1\n"
        "        print(self.path, self.headers['Host'], count, flush=True)\n"
        "        self.send_response(200 if count >= 3 else 503); self.end_headers()\n"
        "    def log_message(self, *a): pass\n"
        f"http.server.HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n"
    )
    p = await client.process.exec(py(server))
    with trio.fail_after(10):
        result = await client.call(
            "process.wait_port",
            {
                "id": p["id"],
                "port": port,
                "mode": "http",
                "path": "/health?x=1",
                "status": {"min": 200, "max": 299},
                "interval_ms": 20,
            },
        )
    assert result["status"] == 200 and result["mode"] == "http"
    logs = b""
    async with client.process.logs(p["id"]) as events:
        async for event in events:
            logs += event.get("data", b"")
    lines = logs.decode().splitlines()
    assert lines[-1] == f"/health?x=1 127.0.0.1:{port} 3"  # two 503s, then ready
    await client.process.kill(p["id"], 9)


async def test_http_attempts_are_interval_ms_apart_once_listening(client: Client) -> None:
    """Readiness is noticed at once, but a listening server that says "not yet" is asked again
    only after interval_ms: the daemon does not hammer it."""
    port = free_port()
    server = (
        "import http.server, time\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        print(repr(time.monotonic()), flush=True)\n"
        "        self.send_response(503); self.end_headers()\n"
        "    def log_message(self, *a): pass\n"
        f"http.server.HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n"
    )
    p = await client.process.exec(py(server))
    err = await error_of(
        client.process.wait_port(p["id"], port, mode="http", interval_ms=200, timeout_ms=1100)
    )
    assert err.code == "PROCESS_READY_TIMEOUT"
    logs = b""
    async with client.process.logs(p["id"]) as events:
        async for event in events:
            logs += event.get("data", b"")
    times = [float(line) for line in logs.split()]
    assert len(times) >= 2  # it did keep asking
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert min(gaps) >= 0.19  # never sooner than interval_ms (lower bound: load only adds)
    await client.process.kill(p["id"], 9)


async def test_exact_status_and_a_status_never_reached(client: Client) -> None:
    port = free_port()
    server = (
        "import http.server\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self): self.send_response(204); self.end_headers()\n"
        "    def log_message(self, *a): pass\n"
        f"http.server.HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n"
    )
    p = await client.process.exec(py(server))
    ok = await client.process.wait_port(p["id"], port, mode="http", status=204)
    assert ok["status"] == 204
    err = await error_of(
        client.call(
            "process.wait_port",
            {
                "id": p["id"],
                "port": port,
                "mode": "http",
                "status": 200,
                "interval_ms": 10,
                "timeout_ms": 300,
            },
        )
    )
    assert err.code == "PROCESS_READY_TIMEOUT"
    assert err.context["timeout"] == 300 and "200" in err.context["condition"]
    assert err.context["process_id"] == p["id"]
    assert (await client.process.get(p["id"]))["state"] == "running"  # type: ignore[index]
    await client.process.kill(p["id"], 9)


async def test_process_exiting_first_ends_the_wait_at_once(client: Client) -> None:
    p = await client.process.exec(["sh", "-c", "echo starting; exit 4"])
    with trio.fail_after(10):  # the interval is an hour: only the exit can end this
        err = await error_of(
            client.call(
                "process.wait_port",
                {"id": p["id"], "port": free_port(), "interval_ms": 3_600_000},
            )
        )
    assert err.code == "PROCESS_EXITED_BEFORE_READY"
    assert err.context["exit_code"] == 4 and err.context["process_id"] == p["id"]
    assert "condition" in err.context and err.context["command"] == [
        "sh",
        "-c",
        "echo starting; exit 4",
    ]


async def test_timeout_and_cancel_never_stop_the_process(client: Client) -> None:
    p = await client.process.exec(["sleep", "300"])
    err = await error_of(
        client.call("process.wait_port", {"id": p["id"], "port": free_port(), "timeout_ms": 50})
    )
    assert err.code == "PROCESS_READY_TIMEOUT"
    with trio.move_on_after(0.1):
        await client.call("process.wait_port", {"id": p["id"], "port": free_port()})
    assert (await client.process.get(p["id"]))["state"] == "running"  # type: ignore[index]
    await client.process.kill(p["id"], 9)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"port": 0}, "port"),
        ({"port": 65536}, "port"),
        ({"port": "80"}, "port"),
        ({"port": 80, "status": {"min": 400, "max": 200}}, "status"),
        ({"port": 80, "status": 99}, "status"),
        ({"port": 80, "status": "200"}, "status"),
        ({"port": 80, "interval_ms": 0}, "interval_ms"),
        ({"port": 80, "mode": "udp"}, "mode"),
        ({"port": 80, "path": "health"}, "path"),
    ],
)
async def test_validation(client: Client, params: dict, field: str) -> None:
    err = await error_of(client.call("port.wait", params))
    assert (err.code, err.context["field"]) == ("VALIDATION_FAILED", field)


async def test_20_concurrent_waiters(client: Client, daemon: Daemon) -> None:
    ports = [free_port() for _ in range(20)]
    gate = make_gate(daemon, "many")
    code = (
        f"import socket; open({gate!r}).read(); socks = []\n"
        f"for port in {ports}:\n"
        "    s = socket.socket(); s.bind(('127.0.0.1', port)); s.listen(); socks.append(s)\n"
        "import time; time.sleep(300)\n"
    )
    p = await client.process.exec(py(code))
    done: list[int] = []

    async def waiter(port: int) -> None:
        async with open_client(daemon.unix) as c:
            result = await c.port.wait(port, interval_ms=3_600_000)  # the typed helper
            done.append(result["port"])

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            for port in ports:
                nursery.start_soon(waiter, port)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(open_gate, gate)
    assert sorted(done) == sorted(ports)
    await client.process.kill(p["id"], 9)


def ss_listeners() -> set[tuple[str, int]]:
    out = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True, check=True).stdout
    found = set()
    for line in out.splitlines():
        local = line.split()[3]
        address, _, port = local.rpartition(":")
        address = address.strip("[]")
        found.add(("::" if address == "*" else address, int(port)))
    return found


async def test_list_agrees_with_ss_and_names_owners(client: Client, daemon: Daemon) -> None:
    port = free_port()
    gate = make_gate(daemon, "list")
    p = await client.process.exec(gated_server(gate, "127.0.0.1", port))
    await open_gate(gate)
    await client.process.wait_log(p["id"], "listening")
    listed = await client.call("port.list")
    assert {(x["address"], x["port"]) for x in listed} == ss_listeners()
    mine = [x for x in listed if x["port"] == port]
    assert mine and mine[0]["owner"] == {"kind": "process", "id": p["id"], "pid": p["pid"]}
    assert mine[0]["family"] == "ipv4"
    await client.process.kill(p["id"], 9)


async def test_watch_reports_listening_and_closed(client: Client, daemon: Daemon) -> None:
    port = free_port()
    gate = make_gate(daemon, "watch")
    async with open_client(daemon.unix) as watcher, watcher.stream("port.watch") as events:
        first = []
        p = await client.process.exec(gated_server(gate, "::1", port))
        await open_gate(gate)
        with trio.fail_after(10):
            async for event in events:
                first.append(event)
                if event["type"] == "listening" and event["port"] == port:
                    break
            initial = {(e["address"], e["port"]) for e in first if e["type"] == "listening"}
            assert initial >= ss_listeners() - {("::1", port)}
            assert first[-1]["address"] == "::1" and first[-1]["family"] == "ipv6"
            await client.process.kill(p["id"], 9)
            async for event in events:
                if event["port"] == port:
                    assert event["type"] == "closed"
                    break


async def test_idle_daemon_does_no_port_polling(client: Client) -> None:
    with pytest.raises(SupervisorError):
        await client.call("port.wait", {"port": free_port(), "timeout_ms": 50})
    before = (await client.call("runtime.info"))["counters"]["port_queries"]
    assert before > 0  # the wait did poll
    # Nothing happens for a while: the counter must not move (a deliberate idle period).
    await trio.sleep(0.3)
    after = (await client.call("runtime.info"))["counters"]["port_queries"]
    assert after == before


def test_cli_wait_port_and_ports(daemon: Daemon) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        out = cli("wait-port", str(port), "--connect", daemon.unix, "--timeout", "10")
        assert out.returncode == 0 and f"port {port} ready (tcp)" in out.stdout
        ports = cli("ports", "--connect", daemon.unix)
        assert str(port) in ports.stdout
    finally:
        listener.close()
    out = cli("wait-port", str(port), "--connect", daemon.unix, "--timeout", "0.1")
    assert out.returncode == 1 and "PROCESS_READY_TIMEOUT" in out.stderr
    out = cli("wait-port", "0", "--connect", daemon.unix)
    assert out.returncode == 1 and "VALIDATION_FAILED" in out.stderr
