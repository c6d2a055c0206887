"""watch.start on real inotify: readiness, recursion into new directories, filters, overflow."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from protocol import ErrorCode, SupervisorError
from supervisor.client import Client, EventStream, open_client

from .conftest import Daemon
from .procs import poll_until, py


async def until(events: EventStream, predicate: Any) -> list[dict[str, Any]]:
    """Events up to and including the first that satisfies `predicate` (30 s at most)."""
    seen = []
    with trio.move_on_after(30):
        async for event in events:
            seen.append(event)
            if predicate(event):
                return seen
        raise AssertionError(f"the stream ended first; {len(seen)} events, last: {seen[-3:]}")
    raise AssertionError(f"no such event within 30 s; {len(seen)} events, last: {seen[-3:]}")


def changes(events: list[dict[str, Any]], root: Path) -> list[tuple[str, str]]:
    return [
        (e["event_type"], os.path.relpath(e["path"], root)) for e in events if e["type"] == "event"
    ]


def inotify_descriptors(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify":
                count += 1
        except OSError:
            pass
    return count


async def test_events_in_a_directory_created_after_the_watch(client: Client, ws: Path) -> None:
    async with client.file.watch(str(ws)) as events:
        first = await events.__anext__()
        assert first["type"] == "watching" and first["path"] == str(ws)
        assert first["watch_id"].startswith("watch-")
        # Everything below happens after `watching`: none of it may be missed. A new
        # directory is watched before its `create` is reported.
        (ws / "sub").mkdir()
        await until(events, lambda e: e.get("path") == str(ws / "sub"))
        (ws / "sub/f.txt").write_bytes(b"1")
        with (ws / "sub/f.txt").open("ab") as f:
            f.write(b"2")
        (ws / "sub/f.txt").rename(ws / "sub/g.txt")
        (ws / "sub/g.txt").chmod(0o600)
        (ws / "sub/g.txt").unlink()
        seen = await until(events, lambda e: e.get("event_type") == "delete")
    got = changes(seen, ws)
    for expected in [
        ("create", "sub/f.txt"),
        ("modify", "sub/f.txt"),
        ("move_from", "sub/f.txt"),
        ("move_to", "sub/g.txt"),
        ("attrib", "sub/g.txt"),
        ("delete", "sub/g.txt"),
    ]:
        assert expected in got, (expected, got)
    assert got.index(("move_from", "sub/f.txt")) < got.index(("move_to", "sub/g.txt"))
    assert all(e["is_directory"] is False and e["timestamp"].endswith("Z") for e in seen)


async def test_files_made_in_a_new_directory_before_its_watch_are_reported(
    client: Client, ws: Path
) -> None:
    async with client.file.watch(str(ws)) as events:
        await until(events, lambda e: e["type"] == "watching")
        # One child process makes the whole tree at once: faster than any watch can be added.
        p = await client.process.exec(
            ["sh", "-c", "mkdir -p a/b/c && echo x > a/b/c/deep.txt"], cwd=str(ws)
        )
        seen = await until(events, lambda e: e.get("path") == str(ws / "a/b/c/deep.txt"))
        await client.process.wait_exit(p["id"])
    assert ("create", "a/b/c") in changes(seen, ws)


async def test_a_thousand_quick_creations_are_never_silent(client: Client, ws: Path) -> None:
    async with client.file.watch(str(ws), include=["*.tmp"]) as events:
        await until(events, lambda e: e["type"] == "watching")
        p = await client.process.exec(
            py("import os\nfor i in range(1000): open(f'f{i}.tmp', 'w').close()"), cwd=str(ws)
        )
        created: set[str] = set()
        overflowed = False
        with trio.fail_after(30):
            async for event in events:
                if event["type"] == "overflow":
                    overflowed = True
                    break
                if event["type"] == "event" and event["event_type"] == "create":
                    created.add(os.path.basename(event["path"]))
                    if len(created) == 1000:
                        break
        await client.process.wait_exit(p["id"])
    assert overflowed or created == {f"f{i}.tmp" for i in range(1000)}


async def overflow_unread(daemon: Daemon, ws: Path, then: str = "") -> None:
    """100,000 events in `ws` (more than the kernel queues: 16,384), then `then`. Run from
    a second connection: the watching one's reader is stalled behind its unread stream."""
    async with open_client(daemon.unix) as other:
        p = await other.process.exec(
            py(
                "import os\nfor name in 'ab': open(name, 'w').close()\n"
                "for i in range(100000): os.utime('ab'[i % 2])\n" + then  # alternating: no merging
            ),
            cwd=str(ws),
        )
        assert (await other.process.wait_exit(p["id"]))["code"] == 0


async def test_a_slow_client_gets_an_overflow_not_unbounded_memory(
    client: Client, daemon: Daemon, ws: Path
) -> None:
    rss_before = psutil.Process(daemon.proc.pid).memory_info().rss
    async with client.file.watch(str(ws)) as events:
        await until(events, lambda e: e["type"] == "watching")
        # Nobody reads while 100,000 events happen: the kernel's queue overflows.
        await overflow_unread(daemon, ws)
        growth = psutil.Process(daemon.proc.pid).memory_info().rss - rss_before
        seen = await until(events, lambda e: e["type"] == "overflow")
    assert seen[-1]["reason"]
    assert growth < 20 * 1024 * 1024


async def test_after_an_overflow_directories_made_meanwhile_are_watched(
    client: Client, daemon: Daemon, ws: Path
) -> None:
    async with client.file.watch(str(ws)) as events:
        await until(events, lambda e: e["type"] == "watching")
        # Nothing is read while the queue overflows and then a directory appears: its
        # create event is lost with the rest.
        await overflow_unread(daemon, ws, then="os.mkdir('late')")
        await until(events, lambda e: e["type"] == "overflow")
        (ws / "late" / "f.txt").write_bytes(b"seen")
        seen = await until(events, lambda e: e.get("path") == str(ws / "late" / "f.txt"))
    assert seen[-1]["event_type"] == "create"


async def test_filters(client: Client, ws: Path) -> None:
    (ws / "node_modules").mkdir()
    async with client.file.watch(str(ws)) as events:  # default excludes
        await until(events, lambda e: e["type"] == "watching")
        (ws / "node_modules/dep.js").write_bytes(b"")
        (ws / ".git").mkdir()
        (ws / ".git/HEAD").write_bytes(b"")
        (ws / "app.js").write_bytes(b"")
        seen = await until(events, lambda e: e.get("path") == str(ws / "app.js"))
    assert changes(seen, ws) == [("create", "app.js")]

    async with client.file.watch(str(ws), include=["*.ts", "docs/**/*.md"]) as events:
        await until(events, lambda e: e["type"] == "watching")
        (ws / "docs/guide").mkdir(parents=True)
        (ws / "docs/guide/intro.md").write_bytes(b"")
        (ws / "notes.md").write_bytes(b"")
        (ws / "index.ts").write_bytes(b"")
        seen = await until(events, lambda e: e.get("path") == str(ws / "index.ts"))
    assert changes(seen, ws) == [("create", "docs/guide/intro.md"), ("create", "index.ts")]

    async with client.file.watch(str(ws), recursive=False, exclude=["*.log"]) as events:
        await until(events, lambda e: e["type"] == "watching")
        (ws / "docs/deep.txt").write_bytes(b"")  # below the top level: not watched
        (ws / "x.log").write_bytes(b"")
        (ws / "top.txt").write_bytes(b"")
        seen = await until(events, lambda e: e.get("path") == str(ws / "top.txt"))
    assert changes(seen, ws) == [("create", "top.txt")]


@pytest.mark.parametrize(
    "params",
    [
        {"include": ["[ab].ts"]},
        {"include": ["{a,b}.ts"]},
        {"exclude": ["a\\*"]},
        {"include": ["*.ts"], "exclude": ["x"]},
        {"path": "does/not/exist"},
        {"path": "a\0b"},
    ],
)
async def test_bad_watch_requests(client: Client, ws: Path, params: dict[str, Any]) -> None:
    params = {"path": str(ws), **params}
    with pytest.raises(SupervisorError) as info:
        async with client.stream("watch.start", params) as events:
            async for _ in events:
                pass
    assert info.value.code == ErrorCode.VALIDATION_FAILED


async def test_cancelling_or_disconnecting_releases_the_kernel_watches(
    client: Client, daemon: Daemon, ws: Path
) -> None:
    pid = daemon.proc.pid
    before = inotify_descriptors(pid)
    async with client.file.watch(str(ws)) as events:
        await until(events, lambda e: e["type"] == "watching")
        assert inotify_descriptors(pid) == before + 1
    await poll_until(lambda: inotify_descriptors(pid) == before)

    async with open_client(daemon.unix) as other, other.file.watch(str(ws)) as events:
        await until(events, lambda e: e["type"] == "watching")
        assert inotify_descriptors(pid) == before + 1
    await poll_until(lambda: inotify_descriptors(pid) == before)


async def test_deleting_the_watched_directory_stops_the_watch(client: Client, ws: Path) -> None:
    (ws / "gone").mkdir()
    async with client.file.watch(str(ws / "gone")) as events:
        await until(events, lambda e: e["type"] == "watching")
        (ws / "gone").rmdir()
        seen = [event async for event in events]
    assert seen[-1]["type"] == "stopped"
    assert events.result["reason"] == seen[-1]["reason"]
