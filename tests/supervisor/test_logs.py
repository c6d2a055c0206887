"""Ring logs and cursors, output, waits: what readers see and what they cannot break."""

from __future__ import annotations

import os

import psutil
import pytest
import trio

from protocol import SupervisorError
from supervisor.client import Client, open_client

from .conftest import Daemon
from .procs import PY, collect, data_of, poll_until, py


async def error_of(awaitable: object) -> SupervisorError:
    with pytest.raises(SupervisorError) as info:
        await awaitable  # type: ignore[misc]
    return info.value


# A child that prints numbered lines, pausing on a readiness handshake-free schedule.
def lines(n: int, stream: str = "stdout") -> list[str]:
    return py(
        f"import sys\nfor i in range({n}): print(f'line {{i}}', file=sys.{stream}, flush=True)"
    )


async def test_event_shapes_and_cursor_order(client: Client, daemon: Daemon) -> None:
    p = await client.process.exec(["sh", "-c", "echo out; echo err >&2; exit 4"])
    events = await collect(client, p["id"])
    kinds = [e["type"] for e in events]
    assert sorted(kinds[:-1]) == ["stderr", "stdout"] and kinds[-1] == "terminal"
    for e in events:
        assert e["cursor"].startswith(p["id"] + ":")
        assert e["timestamp"].endswith("Z")
    terminal = events[-1]
    assert terminal["state"] == "exited"
    assert terminal["exit"] == {"code": 4, "signal": None, "timed_out": False}
    positions = [int(e["cursor"].rsplit(":", 1)[1]) for e in events]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert data_of(events, "stdout") == b"out\n" and data_of(events, "stderr") == b"err\n"


async def test_resume_from_every_cursor_gives_exactly_the_rest(client: Client) -> None:
    """Exactly the rest, byte for byte. (Not event for event: the first pass follows live,
    and a resume from a finished log joins consecutive chunks into fewer events.)"""
    p = await client.process.exec(lines(50))
    events = await collect(client, p["id"])
    for i, event in enumerate(events):
        rest = await collect(client, p["id"], since=event["cursor"])
        assert data_of(rest) == data_of(events[i + 1 :])
        if i + 1 < len(events):
            assert rest[-1] == events[-1]  # the same terminal event, at the same cursor
        else:
            assert rest == []  # after the terminal event there is nothing


async def test_follow_then_resume_while_running(client: Client, daemon: Daemon) -> None:
    """A follower that drops mid-stream and resumes with its last cursor misses nothing."""
    fifo = daemon.dir / f"gate-{id(client)}"
    os.mkfifo(fifo)
    code = f"for i in range(200): print(i, flush=True)\nopen({str(fifo)!r}).read()\nprint('end')"
    p = await client.process.exec(py(code))
    got: list[dict] = []
    async with client.process.logs(p["id"], follow=True) as events:
        async for event in events:
            got.append(event)
            break
    await trio.to_thread.run_sync(fifo.write_text, "go")
    rest = await collect(client, p["id"], since=got[-1]["cursor"])
    whole = data_of(got) + data_of(rest)
    assert whole == b"".join(f"{i}\n".encode() for i in range(200)) + b"end\n"
    assert rest[-1]["type"] == "terminal"


async def test_replay_false_is_live_only(client: Client) -> None:
    p = await client.process.exec(["sh", "-c", "echo before; read x; echo after"])
    # stdin is /dev/null, so `read` fails at once; wait for completion, then ask for live only.
    await client.process.wait_exit(p["id"])
    events = await collect(client, p["id"], replay=False)
    assert [e["type"] for e in events] == ["terminal"]


async def test_no_follow_returns_what_is_buffered(client: Client) -> None:
    p = await client.process.exec(["sh", "-c", "echo ready; exec sleep 300"])
    await client.process.wait_log(p["id"], "ready")
    with trio.fail_after(5):
        async with client.process.logs(p["id"]) as events:
            got = [e async for e in events]
    assert data_of(got) == b"ready\n" and events.result == {"cursor": got[-1]["cursor"]}
    await client.process.kill(p["id"], 9)


@pytest.mark.parametrize("kind", ["malformed", "other", "future"])
async def test_invalid_cursors(client: Client, daemon: Daemon, kind: str) -> None:
    p = await client.process.exec(["echo", "x"])
    q = await client.process.exec(["echo", "y"])
    await client.process.wait_exit(p["id"])
    await client.process.wait_exit(q["id"])
    since = {
        "malformed": "not-a-cursor",
        "other": f"{q['id']}:1",
        "future": f"{p['id']}:99999",
    }[kind]
    for call in (
        collect(client, p["id"], since=since),
        client.process.wait_log(p["id"], "x", since=since),
    ):
        err = await error_of(call)
        assert err.code == "INVALID_PROCESS_CURSOR"
        assert err.context["process_id"] == p["id"] and err.context["cursor"] == since


async def test_overflow_gives_truncated_with_exact_accounting(client: Client) -> None:
    total = 200_000
    p = await client.process.exec(
        py(f"import sys; sys.stdout.write('x' * {total}); sys.stdout.flush()"), buffer_bytes=8192
    )
    await client.process.wait_exit(p["id"])
    events = await collect(client, p["id"])
    assert events[0]["type"] == "truncated"
    dropped = sum(e["dropped_bytes"] for e in events if e["type"] == "truncated")
    assert dropped + len(data_of(events)) == total
    assert 0 < len(data_of(events)) <= 8192
    out = await client.process.output(p["id"])
    assert out["truncated"] is True and out["stdout"] == data_of(events)


async def test_buffer_bytes_limits(client: Client) -> None:
    err = await error_of(client.process.exec(["true"], buffer_bytes=1 << 30))
    assert (err.code, err.context["field"]) == ("VALIDATION_FAILED", "buffer_bytes")
    err = await error_of(client.process.exec(["true"], buffer_bytes=0))
    assert err.context["field"] == "buffer_bytes"


async def test_several_followers_each_get_everything(client: Client, daemon: Daemon) -> None:
    p = await client.process.exec(["sh", "-c", "echo go; read x < /dev/null; " + "seq 1 20000"])
    results: list[bytes] = []

    async def follower() -> None:
        async with open_client(daemon.unix) as c:
            results.append(data_of(await collect(c, p["id"])))

    async with trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(follower)
    expected = b"go\n" + b"".join(f"{i}\n".encode() for i in range(1, 20001))
    assert results == [expected] * 4


async def test_block_flow_is_lossless_with_a_slow_follower(client: Client, daemon: Daemon) -> None:
    total = 2_000_000
    gate = daemon.dir / f"gate-block-{id(client)}"
    os.mkfifo(gate)
    code = (
        f"import sys\nprint('ready', flush=True)\nopen({str(gate)!r}).read()\n"
        f"for i in range({total // 1000}): sys.stdout.write('y' * 1000)"
    )
    p = await client.process.exec(py(code), buffer_bytes=16384, flow="block")
    received = 0
    truncated = 0
    head = b""  # `print` may reach the pipe as two writes: "ready", then "\n"
    async with client.process.logs(p["id"], follow=True) as events:
        async for event in events:
            if event["type"] == "stdout" and head != b"ready\n":
                head += event["data"]
                if head == b"ready\n":
                    await trio.to_thread.run_sync(gate.write_text, "go")
                continue
            if event["type"] == "stdout":
                received += len(event["data"])
                if received < 300_000:
                    await trio.sleep(0.001)  # a deliberately slow reader for a while
            truncated += event["type"] == "truncated"
    assert truncated == 0 and received == total


async def test_block_flow_delivers_the_last_chunk_while_the_child_writes_nothing_more(
    client: Client, daemon: Daemon
) -> None:
    """The chunk a full ring refused goes in as soon as the follower makes room, not at the
    child's next write or exit: here the child has written everything and then waits for us,
    so a chunk held back until more output came would never arrive."""
    total = 400_000
    gate = daemon.dir / f"gate-last-{id(client)}"
    os.mkfifo(gate)
    code = (
        f"import sys\nsys.stdout.write('w' * {total})\nsys.stdout.flush()\n"
        f"open({str(gate)!r}).read()"
    )
    p = await client.process.exec(py(code), buffer_bytes=16384, flow="block")
    received = 0
    with trio.fail_after(20):
        async with client.process.logs(p["id"], follow=True) as events:
            async for event in events:
                assert event["type"] != "truncated"
                if event["type"] == "stdout":
                    received += len(event["data"])
                    if received == total:
                        break
                    await trio.sleep(0.0005)  # a slow reader: the ring fills and refuses
        assert received == total
        await trio.to_thread.run_sync(gate.write_text, "go")
        await client.process.wait_exit(p["id"])


async def test_output_written_a_byte_at_a_time_reaches_a_late_reader_whole(
    client: Client,
) -> None:
    """Thousands of one-byte chunks are joined into a few events; every byte arrives."""
    code = "import os\nfor _ in range(20000): os.write(1, b'x')"
    p = await client.process.exec([PY, "-c", code])
    await client.process.wait_exit(p["id"])
    events = await collect(client, p["id"])
    assert data_of(events) == b"x" * 20000
    assert events[-1]["type"] == "terminal"


async def test_block_flow_without_follower_behaves_like_drop(client: Client) -> None:
    p = await client.process.exec(
        py("import sys; sys.stdout.write('z' * 100000)"), buffer_bytes=8192, flow="block"
    )
    with trio.fail_after(10):
        await client.process.wait_exit(p["id"])
    assert (await client.process.output(p["id"]))["truncated"] is True


async def test_follower_that_never_reads_does_not_slow_the_child(daemon: Daemon) -> None:
    """A client that subscribes and never reads: the child still runs at full speed."""
    async with open_client(daemon.unix) as main:
        code = "import sys\nfor _ in range(400): sys.stdout.write('q' * 65536)"
        p = await main.process.exec(py(code))
        stalled = await trio.open_unix_socket(daemon.socket)
        from protocol import encode_frame

        from .rawpeer import hello

        await stalled.send_all(hello())
        request = {"type": "request", "id": 1, "method": "process.logs"}
        await stalled.send_all(encode_frame({**request, "params": {"id": p["id"], "follow": True}}))
        with trio.fail_after(20):
            exit = await main.process.wait_exit(p["id"])
        assert exit["code"] == 0
        await stalled.aclose()


async def test_disconnecting_follower_of_yes_leaks_nothing(daemon: Daemon) -> None:
    me = psutil.Process(daemon.proc.pid)
    async with open_client(daemon.unix) as c:
        p = await c.process.exec(["yes"])
        baseline = me.num_fds()
        for _ in range(5):
            async with (
                open_client(daemon.unix) as follower,
                follower.process.logs(p["id"], follow=True) as events,
            ):
                n = 0
                async for _event in events:
                    n += 1
                    if n == 50:
                        break
        await poll_until(lambda: me.num_fds() <= baseline)
        snap = await c.process.get(p["id"])
        assert snap is not None and snap["state"] == "running"  # readers never stop it
        await c.process.kill(p["id"], 9)
        await c.process.wait_exit(p["id"])
    assert me.memory_info().rss < 200 * 1024 * 1024


async def test_last_line_before_exit_is_never_lost(client: Client) -> None:
    for i in range(40):
        p = await client.process.exec(["sh", "-c", f"seq 1 {i * 50}; printf LAST-{i}"])
        out = await client.process.output(p["id"])
        assert out["stdout"].endswith(f"LAST-{i}".encode())
        assert len(out["stdout"].splitlines()) == i * 50 + 1


async def test_utf8_split_across_chunks_is_byte_exact(client: Client) -> None:
    text = "héllo wörld € 𝄞 日本語 ".encode() * 3
    code = (
        "import os, time\n"
        f"data = {text!r}\n"
        "for i in range(len(data)):\n"
        "    os.write(1, data[i:i+1])\n"
        "    if i % 3 == 0: time.sleep(0.0005)\n"
    )
    p = await client.process.exec(py(code))
    events = await collect(client, p["id"])
    assert len([e for e in events if e["type"] == "stdout"]) > 1
    assert data_of(events, "stdout") == text


# -- output and waits -----------------------------------------------------------------------


async def test_output_max_bytes_keeps_the_most_recent(client: Client) -> None:
    p = await client.process.exec(["sh", "-c", "seq 1 1000; seq 1 10 >&2"])
    out = await client.process.output(p["id"], max_bytes=10)
    seq = lambda n: b"".join(f"{i}\n".encode() for i in range(1, n + 1))  # noqa: E731
    assert out["stdout"] == seq(1000)[-10:]
    assert out["stderr"] == seq(10)[-10:]
    assert out["truncated"] is True
    full = await client.process.output(p["id"], max_bytes=100000)
    assert full["truncated"] is False and full["stderr"].endswith(b"9\n10\n")


async def test_wait_timeouts_never_stop_the_process(client: Client) -> None:
    p = await client.process.exec(["sleep", "300"])
    for call, op in [
        (client.process.wait_exit(p["id"], timeout_ms=50), "wait_exit"),
        (client.process.output(p["id"], timeout_ms=50), "output"),
        (client.process.wait_log(p["id"], "never", timeout_ms=50), "wait_log"),
    ]:
        err = await error_of(call)
        assert err.code == "PROCESS_WAIT_TIMEOUT"
        assert err.context == {"process_id": p["id"], "operation": op, "timeout": 50}
    snap = await client.process.get(p["id"])
    assert snap is not None and snap["state"] == "running"
    await client.process.kill(p["id"], 9)


async def test_cancelling_a_wait_or_stream_never_stops_the_process(client: Client) -> None:
    p = await client.process.exec(["sh", "-c", "echo hi; exec sleep 300"])
    with trio.move_on_after(0.2):
        await client.process.wait_exit(p["id"])
    async with client.process.logs(p["id"], follow=True) as events:
        async for _ in events:
            break
    err = await error_of(client.call("process.wait_exit", {"id": p["id"], "timeout_ms": 100}))
    assert err.code == "PROCESS_WAIT_TIMEOUT"
    snap = await client.process.get(p["id"])
    assert snap is not None and snap["state"] == "running"
    await client.process.kill(p["id"], 9)


async def test_explicit_cancel_frame_answers_cancelled(daemon: Daemon) -> None:
    from protocol import encode_frame

    from .rawpeer import RawPeer

    async with open_client(daemon.unix) as c:
        p = await c.process.exec(["sleep", "300"])
        peer = await RawPeer.connect(daemon.unix)
        await peer.handshake()
        wait = {
            "type": "request",
            "id": 5,
            "method": "process.wait_exit",
            "params": {"id": p["id"]},
        }
        await peer.send(encode_frame(wait))
        await peer.send(encode_frame({"type": "cancel", "id": 5}))
        reply = await peer.read_one()
        assert reply["id"] == 5 and reply["error"]["code"] == "CANCELLED"
        await peer.aclose()
        snap = await c.process.get(p["id"])
        assert snap is not None and snap["state"] == "running"
        await c.process.kill(p["id"], 9)


async def test_wait_log_finds_matches_across_chunk_edges(client: Client) -> None:
    code = (
        "import time, sys\n"
        "for part in ['Serv', 'er lis', 'tening on ', '30', '00\\n']:\n"
        "    sys.stdout.write(part); sys.stdout.flush(); time.sleep(0.02)\n"
        "time.sleep(300)"
    )
    p = await client.process.exec(py(code))
    found = await client.process.wait_log(p["id"], r"listening on (\d+)\n", timeout_ms=10_000)
    assert found["stream"] == "stdout"
    assert found["match"] == "listening on 3000\n"
    assert found["text"] == "Server listening on 3000"
    assert found["cursor"].startswith(p["id"] + ":")
    await client.process.kill(p["id"], 9)


async def test_wait_log_stream_filter_and_since(client: Client) -> None:
    p = await client.process.exec(
        ["sh", "-c", "echo ready >&2; echo ready; echo second; echo ready"]
    )
    await client.process.wait_exit(p["id"])
    err_match = await client.process.wait_log(p["id"], "ready", stream="stderr")
    assert err_match["stream"] == "stderr"
    first = await client.process.wait_log(p["id"], "ready", stream="stdout")
    assert first["stream"] == "stdout"
    second = await client.process.wait_log(p["id"], "ready", stream="stdout", since=first["cursor"])
    assert second["cursor"] != first["cursor"]


async def test_wait_log_exited_before_match(client: Client) -> None:
    p = await client.process.exec(["sh", "-c", "echo nothing here; exit 2"])
    err = await error_of(client.process.wait_log(p["id"], "ready", timeout_ms=10_000))
    assert err.code == "PROCESS_EXITED_BEFORE_LOG"
    assert err.context["exit"] == {"code": 2, "signal": None, "timed_out": False}
    assert err.context["pid"] == p["pid"]


async def test_wait_log_bad_pattern(client: Client) -> None:
    p = await client.process.exec(["true"])
    err = await error_of(client.process.wait_log(p["id"], "(unclosed"))
    assert (err.code, err.context["field"]) == ("VALIDATION_FAILED", "pattern")


async def test_wait_log_cursor_is_just_after_the_match_even_after_bad_utf8(
    client: Client,
) -> None:
    p = await client.process.exec(["printf", "a\\377b ready\\nmore ready\\n"])
    await client.process.wait_exit(p["id"])
    found = await client.process.wait_log(p["id"], "ready")
    assert found["text"] == "a\ufffdb ready"
    assert found["cursor"] == f"{p['id']}:{len(b'a_b ready')}"
    again = await client.process.wait_log(p["id"], "ready", since=found["cursor"])
    assert again["text"] == "more ready"
    assert again["cursor"] == f"{p['id']}:{len('a_b ready_more ready')}"
