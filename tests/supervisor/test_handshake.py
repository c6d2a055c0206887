"""The handshake and connection rules, against a real daemon over real sockets."""

from __future__ import annotations

import struct
from collections.abc import Callable

import psutil
import pytest
import trio

from protocol import encode_frame
from supervisor.client import open_client

from .conftest import Daemon
from .rawpeer import RawPeer, hello


@pytest.fixture(params=["unix", "tcp"])
def address(request: pytest.FixtureRequest, daemon: Daemon) -> str:
    return daemon.unix if request.param == "unix" else str(daemon.tcp)


async def assert_still_answers(daemon: Daemon) -> None:
    assert daemon.proc.poll() is None, daemon.log_text()
    async with open_client(daemon.unix) as c:
        assert (await c.call("runtime.ping")) == {"instance": daemon.instance}


async def test_handshake_ok(address: str, daemon: Daemon) -> None:
    async with open_client(address) as c:
        assert c.welcome.version == 1
        assert c.welcome.instance == daemon.instance
        assert c.welcome.server.startswith("sandbox-supervisor/")
        assert "runtime" in c.welcome.capabilities
        assert c.welcome.max_frame == 16 * 1024 * 1024
        info = await c.call("runtime.info")
    assert info["instance"] == daemon.instance
    assert info["pid"] == daemon.proc.pid
    assert info["pid1"] is False
    assert daemon.unix in info["listeners"] and daemon.tcp in info["listeners"]
    assert info["protocol_versions"] == [1]
    assert isinstance(info["uptime"], float) and info["started_at"].endswith("Z")


async def test_version_mismatch(address: str, daemon: Daemon) -> None:
    peer = await RawPeer.connect(address)
    await peer.send(encode_frame({"type": "hello", "versions": [7, 8], "client": "x"}))
    (error,) = await peer.read_until_closed()
    assert error["type"] == "error"
    assert error["code"] == "UNSUPPORTED_PROTOCOL_VERSION"
    assert error["context"]["supported"] == [1]
    await assert_still_answers(daemon)


async def test_activation_mismatch(address: str, daemon: Daemon) -> None:
    with pytest.raises(Exception) as info:
        async with open_client(address, instance="ffffffffffffffff"):
            pass
    err = info.value
    assert getattr(err, "code", None) == "ACTIVATION_MISMATCH"
    assert err.context == {"expected": "ffffffffffffffff", "actual": daemon.instance}  # type: ignore[attr-defined]
    async with open_client(address, instance=daemon.instance) as c:
        await c.call("runtime.ping")


async def test_request_before_hello(address: str, daemon: Daemon) -> None:
    peer = await RawPeer.connect(address)
    await peer.send(encode_frame({"type": "request", "id": 1, "method": "runtime.ping"}))
    (error,) = await peer.read_until_closed()
    assert error["code"] == "HANDSHAKE_REQUIRED"
    await assert_still_answers(daemon)


@pytest.mark.parametrize("after_hello", [False, True])
async def test_oversized_length_prefix_is_refused_unread(
    address: str, daemon: Daemon, after_hello: bool
) -> None:
    """A 4 GiB length prefix is answered at once; the daemon never allocates it."""
    rss_before = psutil.Process(daemon.proc.pid).memory_info().rss
    peer = await RawPeer.connect(address)
    if after_hello:
        await peer.handshake()
    await peer.send(struct.pack(">I", 0xFFFFFFFF) + b"\x00" * 1000)
    messages = await peer.read_until_closed()
    assert messages[-1]["code"] == "FRAME_TOO_LARGE"
    assert messages[-1]["context"]["max_frame"] == 16 * 1024 * 1024
    rss_after = psutil.Process(daemon.proc.pid).memory_info().rss
    assert rss_after - rss_before < 32 * 1024 * 1024
    await assert_still_answers(daemon)


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00\x00\x00\x03abc",
        struct.pack(">I", 3) + b"\x93\x01\x02",  # a msgpack array, not a map
        encode_frame({"no_type": 1}),
    ],
)
async def test_garbage_after_hello_is_invalid_frame(
    address: str, daemon: Daemon, garbage: bytes
) -> None:
    peer = await RawPeer.connect(address)
    await peer.handshake()
    await peer.send(garbage)
    messages = await peer.read_until_closed()
    assert messages[-1]["type"] == "error"
    assert messages[-1]["code"] == "INVALID_FRAME"
    await assert_still_answers(daemon)


async def test_garbage_instead_of_hello_is_answered_and_closed(daemon: Daemon) -> None:
    peer = await RawPeer.connect(daemon.unix)
    await peer.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    messages = await peer.read_until_closed()
    assert messages[-1]["code"] in ("FRAME_TOO_LARGE", "INVALID_FRAME")
    await assert_still_answers(daemon)


async def test_peer_that_vanishes_mid_frame(daemon: Daemon) -> None:
    peer = await RawPeer.connect(daemon.unix)
    await peer.send(hello()[:5])
    await peer.aclose()
    await assert_still_answers(daemon)


async def test_silent_peer_is_dropped_after_the_handshake_timeout(
    spawn_daemon: Callable[..., Daemon],
) -> None:
    d = spawn_daemon("--handshake-timeout", "0.3")
    peer = await RawPeer.connect(d.unix)
    (error,) = await peer.read_until_closed()
    assert error["code"] == "HANDSHAKE_TIMEOUT"
    await assert_still_answers(d)


async def test_token_required_and_checked(spawn_daemon: Callable[..., Daemon]) -> None:
    d = spawn_daemon(env={"SUPERVISOR_TOKEN": "s3cret"})
    for address in (d.unix, str(d.tcp)):
        for token in (None, "wrong"):
            with pytest.raises(Exception) as info:
                async with open_client(address, token=token):
                    pass
            assert getattr(info.value, "code", None) == "UNAUTHORIZED"
            assert "s3cret" not in str(info.value)
        async with open_client(address, token="s3cret") as c:
            await c.call("runtime.ping")


async def test_token_from_file(spawn_daemon: Callable[..., Daemon], tmp_path: object) -> None:
    import pathlib

    token_file = pathlib.Path(str(tmp_path)) / "token"
    token_file.write_text("from-file\n")
    d = spawn_daemon("--token-file", str(token_file))
    async with open_client(str(d.tcp), token="from-file") as c:
        await c.call("runtime.ping")
    with pytest.raises(Exception) as info:
        async with open_client(str(d.tcp), token="from-file\n"):
            pass
    assert getattr(info.value, "code", None) == "UNAUTHORIZED"


async def test_unknown_method_and_bad_params_keep_the_connection(address: str) -> None:
    async with open_client(address) as c:
        with pytest.raises(Exception) as info:
            await c.call("nope.nothing")
        assert getattr(info.value, "code", None) == "METHOD_NOT_FOUND"
        assert info.value.context == {"method": "nope.nothing"}  # type: ignore[attr-defined]
        with pytest.raises(Exception) as info:
            await c.call("runtime.ping", 5)  # type: ignore[arg-type]
        assert getattr(info.value, "code", None) == "VALIDATION_FAILED"
        assert info.value.context == {"field": "params"}  # type: ignore[attr-defined]
        # Unknown extra keys are ignored (forward compatibility).
        assert "instance" in await c.call("runtime.ping", {"from_the_future": True})


async def test_duplicate_request_id_in_flight_closes_the_connection(daemon: Daemon) -> None:
    """An id reused while still in flight is REQUEST_ID_IN_USE; reuse after the reply is fine."""
    peer = await RawPeer.connect(daemon.unix)
    await peer.handshake()
    request = encode_frame({"type": "request", "id": 9, "method": "runtime.ping"})
    await peer.send(request)
    assert (await peer.read_one())["id"] == 9
    # Both copies arrive in one read; the first may or may not be answered in between.
    await peer.send(request + request)
    replies = []
    while len(replies) < 2:
        message = await peer.read_one()
        replies.append(message)
        if message["type"] == "error":
            assert message["code"] == "REQUEST_ID_IN_USE"
            assert await peer.read_until_closed() == []
            break
    else:
        assert [r["id"] for r in replies] == [9, 9]
        await peer.aclose()
    await assert_still_answers(daemon)


async def test_200_concurrent_requests_on_one_connection(address: str, daemon: Daemon) -> None:
    results: list[object] = []
    async with open_client(address) as c:

        async def one(i: int) -> None:
            method = "runtime.info" if i % 2 else "runtime.ping"
            results.append((await c.call(method))["instance"])

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                for i in range(200):
                    nursery.start_soon(one, i)
    assert results == [daemon.instance] * 200


async def test_requests_are_pipelined_and_matched_by_id(daemon: Daemon) -> None:
    """Raw: 50 requests written in one burst; every id answered exactly once."""
    peer = await RawPeer.connect(daemon.unix)
    await peer.handshake()
    burst = b"".join(
        encode_frame({"type": "request", "id": i, "method": "runtime.ping"}) for i in range(50)
    )
    await peer.send(burst)
    seen = set()
    for _ in range(50):
        message = await peer.read_one()
        assert message["type"] == "response" and message["result"]["instance"]
        seen.add(message["id"])
    assert seen == set(range(50))
    await peer.aclose()


async def test_100_concurrent_connections(address: str, daemon: Daemon) -> None:
    done = []

    async def one() -> None:
        async with open_client(address) as c:
            await c.call("runtime.ping")
            done.append(1)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for _ in range(100):
                nursery.start_soon(one)
    assert len(done) == 100
    await assert_still_answers(daemon)


async def test_requests_in_flight_are_bounded_per_connection(daemon: Daemon) -> None:
    """Beyond 1,024 in flight, a request is refused at once; the connection stays usable."""
    async with open_client(daemon.unix) as c:
        p = await c.process.exec(["sleep", "300"])
        peer = await RawPeer.connect(daemon.unix)
        await peer.handshake()
        wait = {"type": "request", "method": "process.wait_exit", "params": {"id": p["id"]}}
        await peer.send(b"".join(encode_frame({**wait, "id": i}) for i in range(1030)))
        refused = [await peer.read_one() for _ in range(6)]
        assert all(r["error"]["code"] == "TOO_MANY_REQUESTS" for r in refused)
        assert {r["id"] for r in refused} == set(range(1024, 1030))
        assert refused[0]["error"]["context"] == {"max_in_flight": 1024}
        # Still usable: once one finishes, a new request is served.
        await peer.send(encode_frame({"type": "cancel", "id": 0}))
        assert (await peer.read_one())["error"]["code"] == "CANCELLED"
        await peer.send(encode_frame({"type": "request", "id": 5000, "method": "runtime.ping"}))
        assert (await peer.read_one())["id"] == 5000
        await peer.aclose()
        await c.process.kill(p["id"], 9)


async def test_a_wait_on_what_has_already_happened_is_answered_at_once(daemon: Daemon) -> None:
    """wait_exit and output of a finished process, and wait_exit of a finished terminal, need
    no wait: they are answered inline, even on a connection whose 1,024 waiting requests would
    refuse a new one."""
    async with open_client(daemon.unix) as c:
        sleeper = await c.process.exec(["sleep", "300"])
        done = await c.process.exec(["sh", "-c", "echo out; exit 4"])
        await c.process.wait_exit(done["id"])
        ended = await c.terminal.create(["sh", "-c", "exit 3"])
        await c.terminal.wait_exit(ended["id"])
        peer = await RawPeer.connect(daemon.unix)
        await peer.handshake()
        wait = {"type": "request", "method": "process.wait_exit", "params": {"id": sleeper["id"]}}
        await peer.send(b"".join(encode_frame({**wait, "id": i}) for i in range(1024)))
        settled = {"type": "request", "params": {"id": done["id"]}}
        await peer.send(
            encode_frame({**settled, "id": 5000, "method": "process.wait_exit"})
            + encode_frame({**settled, "id": 5001, "method": "process.output"})
            + encode_frame({**wait, "id": 5002})  # this one must wait: refused
            + encode_frame(
                {
                    "type": "request",
                    "id": 5003,
                    "method": "terminal.wait_exit",
                    "params": {"id": ended["id"]},
                }
            )
        )
        replies = {r["id"]: r for r in [await peer.read_one() for _ in range(4)]}
        assert replies[5000]["result"] == {"code": 4, "signal": None, "timed_out": False}
        assert replies[5001]["result"]["stdout"] == b"out\n"
        assert replies[5002]["error"]["code"] == "TOO_MANY_REQUESTS"
        assert replies[5003]["result"]["code"] == 3
        await peer.aclose()
        await c.process.kill(sleeper["id"], 9)
