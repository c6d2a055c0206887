"""The HTTP front: health and readiness, the protocol over WebSocket, browser terminals."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable

import pytest
import trio

from protocol import ErrorCode, SupervisorError, pack_message, unpack_message
from supervisor.client import open_client
from supervisor.websocket import SUBPROTOCOL

from .conftest import Daemon
from .procs import py
from .webpeer import get, host_port, http_request, next_control, read_until, websocket

TOKEN = "s3cret-token-for-tests"


@pytest.fixture
def guarded(spawn_daemon: Callable[..., Daemon]) -> Daemon:
    """A daemon whose clients need a token."""
    return spawn_daemon(env={"SUPERVISOR_TOKEN": TOKEN})


async def test_health_needs_no_token_and_tells_no_secrets(guarded: Daemon) -> None:
    status, body = await get(guarded.http, "/healthz")
    assert status == 200
    assert set(body) == {"status", "instance", "server", "uptime"}
    assert body["status"] == "ok" and body["instance"] == guarded.instance
    assert TOKEN not in json.dumps(body)
    status, body = await get(guarded.http, "/readyz")
    assert status == 200 and body["ready"] is True


async def test_readiness_is_503_through_shutdown(spawn_daemon: Callable[..., Daemon]) -> None:
    d = spawn_daemon("--stop-grace", "30")
    async with open_client(d.unix) as c:
        stubborn = py(
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
            "print('ready', flush=True); time.sleep(300)"
        )
        p = await c.process.exec(stubborn)
        await c.process.wait_log(p["id"], "ready")
    d.proc.send_signal(signal.SIGTERM)
    with trio.fail_after(20):
        while (await get(d.http, "/readyz"))[0] != 503:  # noqa: ASYNC110 - another process
            await trio.sleep(0.01)
    status, body = await get(d.http, "/healthz")
    assert status == 200 and body["status"] == "stopping"
    with pytest.raises(SupervisorError):
        async with open_client(str(d.http)):
            pass
    d.proc.send_signal(signal.SIGINT)  # hurry: SIGKILL what is left
    assert d.wait() == 0


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", 404),
        (b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 405),
        (b"DELETE /rpc HTTP/1.1\r\nHost: x\r\n\r\n", 405),
        (b"GET /rpc HTTP/1.1\r\nHost: x\r\n\r\n", 400),  # not an upgrade
        (b"this is not http\r\n\r\n", 400),
        (b"GET /healthz HTTP/1.1\r\n\r\n", 400),  # HTTP/1.1 needs a Host
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n", 400),
        (  # an upgrade without a key
            b"GET /rpc HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Version: 13\r\n\r\n",
            400,
        ),
    ],
)
async def test_bad_requests_get_a_status_and_nothing_breaks(
    daemon: Daemon, raw: bytes, status: int
) -> None:
    assert (await http_request(daemon.http, raw))[0] == status
    assert (await get(daemon.http, "/healthz"))[0] == 200


async def test_rpc_over_websocket_speaks_the_subprotocol(daemon: Daemon) -> None:
    async with websocket(daemon.http, "/rpc", subprotocols=["other", SUBPROTOCOL]) as ws:
        assert ws._ws is not None  # the upgrade was accepted with our subprotocol
        hello = {"type": "hello", "versions": [1], "client": "raw"}
        await ws.send_bytes(pack_message(hello))
        welcome = unpack_message(await ws.receive())  # type: ignore[arg-type]
        assert welcome["type"] == "welcome" and welcome["instance"] == daemon.instance
        request = {"type": "request", "id": 1, "method": "runtime.ping", "params": {}}
        await ws.send_bytes(pack_message(request))
        reply = unpack_message(await ws.receive())  # type: ignore[arg-type]
        assert reply == {"type": "response", "id": 1, "result": {"instance": daemon.instance}}
        await ws.send_text("text is not protocol")
        error = unpack_message(await ws.receive())  # type: ignore[arg-type]
        assert error["type"] == "error" and error["code"] == ErrorCode.INVALID_FRAME
    with pytest.raises(Exception, match="400"):
        async with websocket(daemon.http, "/rpc", subprotocols=["something-else"]):
            pass


async def test_auth_by_hello_token_or_bearer_header(guarded: Daemon) -> None:
    with pytest.raises(SupervisorError) as info:
        async with open_client(str(guarded.http)):
            pass
    assert info.value.code == ErrorCode.UNAUTHORIZED
    async with open_client(str(guarded.http), token=TOKEN) as c:
        assert (await c.call("runtime.ping"))["instance"] == guarded.instance
    wrong = [(b"authorization", b"Bearer nope")]
    with pytest.raises(Exception, match="401"):
        async with websocket(guarded.http, "/rpc", headers=wrong):
            pass
    right = [(b"authorization", f"Bearer {TOKEN}".encode())]
    async with websocket(guarded.http, "/rpc", headers=right) as ws:
        await ws.send_bytes(pack_message({"type": "hello", "versions": [1], "client": "raw"}))
        welcome = unpack_message(await ws.receive())  # type: ignore[arg-type]
        assert welcome["type"] == "welcome"  # no token in the hello: the header sufficed


async def test_a_hundred_websocket_clients_at_once(daemon: Daemon) -> None:
    answered = 0

    async def one() -> None:
        nonlocal answered
        async with open_client(str(daemon.http)) as c:
            for _ in range(5):
                await c.call("runtime.ping")
            answered += 1

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for _ in range(100):
                nursery.start_soon(one)
    assert answered == 100


async def test_an_oversized_message_closes_with_1009(spawn_daemon: Callable[..., Daemon]) -> None:
    d = spawn_daemon("--max-frame", "65536")
    async with websocket(d.http, "/rpc") as ws:
        await ws.send_bytes(b"\x80" * 100_000)
        assert await ws.receive() is None
        assert ws.close_code == 1009
    assert (await get(d.http, "/healthz"))[0] == 200


async def test_idle_peers_are_pinged_then_closed(spawn_daemon: Callable[..., Daemon]) -> None:
    d = spawn_daemon("--ws-ping-interval", "0.2", "--ws-idle-timeout", "1")
    hello = pack_message({"type": "hello", "versions": [1], "client": "raw"})
    async with websocket(d.http, "/rpc") as lively:
        await lively.send_bytes(hello)
        assert unpack_message(await lively.receive())["type"] == "welcome"  # type: ignore[arg-type]
        # Reading answers the daemon's pings: the connection outlives the idle timeout.
        with trio.move_on_after(2.5) as kept:
            await lively.receive()
        assert kept.cancelled_caught
    async with websocket(d.http, "/rpc") as silent:
        await silent.send_bytes(hello)
        # From now on nothing is read, so no pong goes back, and the daemon hangs up.
        with trio.fail_after(10):
            while await silent.io.receive_some(65536):
                pass


# -- browser terminals -----------------------------------------------------------------------


async def test_browser_terminal_round_trip_resize_and_reconnect(daemon: Daemon) -> None:
    async with open_client(daemon.unix) as c:
        t = await c.terminal.create(["sh"], cols=80, rows=24)
        path = f"/terminals/{t['id']}?cols=100&rows=30"
        async with websocket(daemon.http, path) as ws:
            await next_control(ws, "ready")
            await ws.send_bytes(b"stty size; printf 'hello-%s\\n' browser\n")
            output, _ = await read_until(ws, b"hello-browser\r\n")
            assert b"30 100" in output
            await ws.send_text(json.dumps({"type": "resize", "cols": 120, "rows": 40}))
            await ws.send_bytes(b"stty size\n")
            await read_until(ws, b"40 120")
            await ws.send_text("{not json")
            error, _ = await next_control(ws, "error")
            assert "resize" in error["message"] or "Expecting" in error["message"]
        # Disconnected: the terminal runs on. Output made meanwhile is replayed from a cursor.
        assert (await c.terminal.get(t["id"]))["status"] == "running"
        async with websocket(daemon.http, f"/terminals/{t['id']}") as ws:
            ready, replay = await next_control(ws, "ready")
            assert b"hello-browser" in replay  # everything, from the start
            cursor = ready["cursor"]
        await c.terminal.write(t["id"], b"printf 'while-%s\\n' away\n")
        async with websocket(daemon.http, f"/terminals/{t['id']}?cursor={cursor}") as ws:
            output, _ = await read_until(ws, b"while-away\r\n")
            assert b"hello-browser" not in output
            await ws.send_bytes(b"exit 3\n")
            exit, _ = await next_control(ws, "exit")
            assert exit["code"] == 3
            assert await ws.receive() is None


async def test_browser_terminal_tickets(guarded: Daemon) -> None:
    async with open_client(guarded.unix, token=TOKEN) as c:
        t = await c.terminal.create(["sh"])
        other = await c.terminal.create(["sh"])
        issued = await c.call("terminal.ticket", {"id": t["id"], "ttl_ms": 60_000})
        assert issued["path"] == f"/terminals/{t['id']}?ticket={issued['ticket']}"
        for path in (
            f"/terminals/{t['id']}",
            f"/terminals/{t['id']}?ticket=0.{issued['ticket'].split('.')[1]}",  # expired
            f"/terminals/{other['id']}?ticket={issued['ticket']}",  # another terminal's
        ):
            with pytest.raises(Exception, match="401"):
                async with websocket(guarded.http, path):
                    pass
        async with websocket(guarded.http, issued["path"]) as ws:
            await next_control(ws, "ready")
        for terminal in (t, other):
            await c.terminal.terminate(terminal["id"])


async def test_unknown_terminal_is_404(daemon: Daemon) -> None:
    with pytest.raises(Exception, match="404"):
        async with websocket(daemon.http, f"/terminals/term-{daemon.instance}-999999"):
            pass


async def test_a_slow_browser_is_told_what_it_missed_and_blocks_nothing(daemon: Daemon) -> None:
    async with open_client(daemon.unix) as c:
        t = await c.terminal.create(["sh", "-c", "read go; head -c 30000000 /dev/zero; echo END"])
        async with websocket(daemon.http, f"/terminals/{t['id']}") as ws:
            await next_control(ws, "ready")
            await c.terminal.write(t["id"], b"go\n")
            # This browser reads nothing while 30 MB go by: the terminal is not held back.
            with trio.fail_after(30):
                exit = await c.terminal.wait_exit(t["id"])
            assert exit["code"] == 0
            truncated, _ = await next_control(ws, "truncated")
            assert truncated["dropped_bytes"] > 0
            await read_until(ws, b"END")
            await next_control(ws, "exit")


def masked_frame(payload: bytes) -> bytes:
    """One client-to-server binary WebSocket frame (RFC 6455 5.2), masked as clients must."""
    assert len(payload) < 126
    key = b"\x01\x02\x03\x04"
    body = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return bytes([0x82, 0x80 | len(payload)]) + key + body


async def test_frames_sent_with_the_upgrade_request_are_not_lost(daemon: Daemon) -> None:
    """A client may send its first message right behind the upgrade request, before the
    101 arrives; those bytes reach the daemon in the same read as the request's head."""
    host, port = host_port(daemon.http)
    hello = pack_message({"type": "hello", "versions": [1], "client": "eager"})
    upgrade = (
        f"GET /rpc HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n"
    ).encode()
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        await stream.send_all(upgrade + masked_frame(hello))
        received = b""
        with trio.fail_after(10):
            while b"welcome" not in received:
                chunk = await stream.receive_some(65536)
                assert chunk, f"closed: {received!r}"
                received += chunk
    assert received.startswith(b"HTTP/1.1 101")


def test_cli_detached_terminal_and_ticket(daemon: Daemon) -> None:
    from .test_cli import cli

    out = cli("term", "--connect", daemon.unix, "--detach", "--", "true")
    assert out.returncode == 0, out.stderr
    terminal_id = out.stdout.strip()
    out = cli("ticket", "--connect", daemon.unix, "--json", "--ttl", "30", terminal_id)
    issued = json.loads(out.stdout)
    assert issued["path"] == f"/terminals/{terminal_id}?ticket={issued['ticket']}"
    out = cli("ticket", "--connect", daemon.unix, f"term-{daemon.instance}-999999")
    assert out.returncode == 1 and "[TERMINAL_NOT_FOUND]" in out.stderr


def test_an_exposed_http_front_needs_a_token() -> None:
    from .test_cli import cli

    out = cli("serve", "--listen", "http:0.0.0.0:0", "--workspace", "/tmp")
    assert out.returncode == 2 and "without a token" in out.stderr
