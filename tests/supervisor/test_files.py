"""file.* against a real daemon and real filesystems (ext4 workspace, tmpfs in /dev/shm)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePath

import psutil
import pytest
import trio

from protocol import ErrorCode, SupervisorError
from supervisor.client import Client, open_client
from supervisor.files import TEMP_SUFFIX

from .conftest import Daemon
from .procs import poll_until

MiB = 1024 * 1024


def rel(ws: Path, name: str = "") -> str:
    return f"{ws.name}/{name}" if name else ws.name


async def code_of(call: object) -> str:
    with pytest.raises(SupervisorError) as info:
        await call  # type: ignore[misc]
    return info.value.code


def temp_files(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.name.endswith(TEMP_SUFFIX)]


# -- content -------------------------------------------------------------------------------


async def test_round_trip_is_byte_exact_with_metadata(client: Client, ws: Path) -> None:
    every_byte = bytes(range(256)) * 7
    written = await client.file.write(rel(ws, "blob.bin"), every_byte)
    assert written == {"path": str(ws / "blob.bin"), "size": len(every_byte)}
    got = await client.file.read(rel(ws, "blob.bin"))
    assert got["content"] == every_byte
    assert (got["size"], got["is_text"], got["mime_type"]) == (
        1792,
        False,
        "application/octet-stream",
    )
    assert (ws / "blob.bin").read_bytes() == every_byte

    await client.file.write(rel(ws, "main.py"), "print('héllo')\n".encode())
    text = await client.file.read(str(ws / "main.py"))  # absolute paths work too
    assert (text["is_text"], text["mime_type"]) == (True, "text/x-python")

    png = b"\x89PNG\r\n\x1a\n" + bytes(100)
    await client.file.write(rel(ws, "chart"), png)
    assert (await client.file.read(rel(ws, "chart")))["mime_type"] == "image/png"
    await client.file.write(rel(ws, "empty"), b"")
    assert (await client.file.read(rel(ws, "empty")))["content"] == b""


async def test_a_big_file_streams_and_daemon_memory_stays_bounded(
    client: Client, daemon: Daemon, ws: Path
) -> None:
    """100 MiB up and down, byte-exact, while the daemon's RSS stays near its size before."""
    size, chunk = 100 * MiB, MiB
    process = psutil.Process(daemon.proc.pid)
    rss_before = process.memory_info().rss
    peak = rss_before

    def chunks() -> Iterator[bytes]:
        nonlocal peak
        for i in range(size // chunk):
            peak = max(peak, process.memory_info().rss)
            yield hashlib.sha256(i.to_bytes(4, "big")).digest() * (chunk // 32)

    expected = hashlib.sha256()
    for piece in chunks():
        expected.update(piece)
    result = await client.file.write_chunks(rel(ws, "big.bin"), chunks())
    assert result["size"] == size
    got, received = hashlib.sha256(), 0
    async for piece in client.file.read_chunks(rel(ws, "big.bin")):
        got.update(piece)
        received += len(piece)
        peak = max(peak, process.memory_info().rss)
    assert received == size
    assert got.hexdigest() == expected.hexdigest()
    assert peak - rss_before < 40 * MiB, f"daemon RSS grew by {(peak - rss_before) / MiB:.1f} MiB"


async def test_streamed_reads_come_in_chunks_of_the_asked_size(client: Client, ws: Path) -> None:
    (ws / "f").write_bytes(b"x" * 10_000)
    async with client.stream("file.read", {"path": rel(ws, "f"), "chunk_bytes": 4096}) as events:
        sizes = [(e["offset"], len(e["data"])) async for e in events]
    assert sizes == [(0, 4096), (4096, 4096), (8192, 1808)]
    assert events.result["size"] == 10_000
    assert events.result["content"] is None


# -- atomic writes -------------------------------------------------------------------------


async def test_readers_see_the_old_content_or_the_new_never_a_mix(client: Client, ws: Path) -> None:
    path = rel(ws, "config")
    versions = [b"A" * MiB, b"B" * MiB]
    await client.file.write(path, versions[0])
    async with trio.open_nursery() as nursery:

        async def writer() -> None:
            for i in range(30):
                await client.file.write(path, versions[i % 2])
            nursery.cancel_scope.cancel()

        async def reader() -> None:
            while True:
                content = (await client.file.read(path))["content"]
                assert content in versions, "a torn read"

        nursery.start_soon(writer)
        nursery.start_soon(reader)
    assert temp_files(ws) == []


async def test_two_concurrent_uploads_leave_one_complete_version(client: Client, ws: Path) -> None:
    path = rel(ws, "race")
    a = [bytes([65 + i]) * 65536 for i in range(20)]
    b = [bytes([97 + i]) * 65536 for i in range(20)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.file.write_chunks, path, a)
        nursery.start_soon(client.file.write_chunks, path, b)
    content = (ws / "race").read_bytes()
    assert content in (b"".join(a), b"".join(b))
    assert temp_files(ws) == []


async def test_an_abandoned_upload_leaves_nothing_behind(daemon: Daemon, ws: Path) -> None:
    async with open_client(daemon.unix) as c:
        upload = (await c.call("file.upload_begin", {"path": rel(ws, "half")}))["upload_id"]
        await c.call("file.upload_chunk", {"upload_id": upload, "data": b"x" * 1000, "offset": 0})
        assert len(temp_files(ws)) == 1
    await poll_until(lambda: temp_files(ws) == [])  # the daemon saw the disconnect
    assert not (ws / "half").exists()


async def test_upload_rules(client: Client, daemon: Daemon, ws: Path) -> None:
    path = rel(ws, "up")
    begin = await client.call("file.upload_begin", {"path": path})
    upload = begin["upload_id"]
    chunk = {"upload_id": upload, "data": b"abc", "offset": 0}
    assert (await client.call("file.upload_chunk", chunk))["received"] == 3
    repeat = client.call("file.upload_chunk", chunk)
    assert await code_of(repeat) == ErrorCode.VALIDATION_FAILED  # offset must be 3
    async with open_client(daemon.unix) as other:  # uploads belong to their connection
        stolen = other.call("file.upload_commit", {"upload_id": upload})
        assert await code_of(stolen) == ErrorCode.UPLOAD_NOT_FOUND
    assert not (ws / "up").exists()  # nothing appears before the commit
    assert (await client.call("file.upload_commit", {"upload_id": upload}))["size"] == 3
    assert (ws / "up").read_bytes() == b"abc"
    again = client.call("file.upload_commit", {"upload_id": upload})
    assert await code_of(again) == ErrorCode.UPLOAD_NOT_FOUND

    aborted = (await client.call("file.upload_begin", {"path": path}))["upload_id"]
    await client.call("file.upload_abort", {"upload_id": aborted})
    assert temp_files(ws) == []
    assert (ws / "up").read_bytes() == b"abc"


async def test_modes_and_parent_directories(client: Client, ws: Path) -> None:
    await client.file.write(rel(ws, "secret"), b"s", mode=0o600)
    assert (await client.file.stat(rel(ws, "secret")))["mode"] == 0o600
    (ws / "script").write_bytes(b"#!/bin/sh\n")
    (ws / "script").chmod(0o755)
    await client.file.write(rel(ws, "script"), b"#!/bin/sh\nexit 0\n")
    assert (ws / "script").stat().st_mode & 0o7777 == 0o755  # an overwrite keeps the mode
    await client.file.write(rel(ws, "new"), b"n")
    assert (ws / "new").stat().st_mode & 0o7777 == 0o644

    missing = client.file.write(rel(ws, "a/b/c.txt"), b"x")
    assert await code_of(missing) == ErrorCode.FILE_NOT_FOUND
    await client.file.write(rel(ws, "a/b/c.txt"), b"x", create_parents=True)
    assert (ws / "a/b/c.txt").read_bytes() == b"x"
    bad_mode = client.file.write(rel(ws, "m"), b"", mode=0o10000)
    assert await code_of(bad_mode) == ErrorCode.VALIDATION_FAILED


async def test_writing_through_a_symlink_keeps_the_link(client: Client, ws: Path) -> None:
    (ws / "real").write_bytes(b"old")
    (ws / "link").symlink_to("real")
    await client.file.write(rel(ws, "link"), b"new")
    assert (ws / "link").is_symlink()
    assert (ws / "real").read_bytes() == b"new"


# -- metadata and directories --------------------------------------------------------------


async def test_list_stat_and_exists(client: Client, ws: Path) -> None:
    (ws / "src/lib").mkdir(parents=True)
    (ws / "src/main.py").write_bytes(b"12345")
    (ws / "src/lib/util.py").write_bytes(b"")
    (ws / ".env").write_bytes(b"SECRET=1")
    (ws / "link").symlink_to("src/main.py")

    top = await client.file.list(rel(ws))
    assert [e["name"] for e in top["entries"]] == ["link", "src"]
    assert top["truncated"] is False
    by_name = {e["name"]: e for e in top["entries"]}
    assert by_name["link"]["type"] == "symlink"
    assert by_name["link"]["target"] == "src/main.py"
    assert by_name["src"]["type"] == "directory"

    every = await client.file.list(rel(ws), recursive=True, hidden=True)
    paths = [str(PurePath(e["path"]).relative_to(ws)) for e in every["entries"]]
    assert paths == [".env", "link", "src", "src/lib", "src/lib/util.py", "src/main.py"]
    main = next(e for e in every["entries"] if e["name"] == "main.py")
    assert (main["type"], main["size"], main["mode"]) == ("file", 5, 0o644)
    assert main["modified_at"].endswith("Z")
    assert (await client.file.list(rel(ws), recursive=True, limit=2))["truncated"] is True

    assert (await client.file.stat(rel(ws, "src/main.py")))["size"] == 5
    assert await client.file.exists(rel(ws, "src")) is True
    assert await client.file.exists(rel(ws, "nothing")) is False
    assert await client.file.exists(rel(ws, "src/main.py/below")) is False  # never errors

    assert await code_of(client.file.stat(rel(ws, "nothing"))) == ErrorCode.FILE_NOT_FOUND
    assert await code_of(client.file.list(rel(ws, "src/main.py"))) == ErrorCode.NOT_A_DIRECTORY
    assert await code_of(client.file.list(rel(ws, "nothing"))) == ErrorCode.FILE_NOT_FOUND
    assert await code_of(client.file.read(rel(ws, "src"))) == ErrorCode.IS_A_DIRECTORY


async def test_mkdir_and_delete(client: Client, ws: Path) -> None:
    made = await client.file.mkdir(rel(ws, "d"))
    assert made["type"] == "directory"
    assert await code_of(client.file.mkdir(rel(ws, "d"))) == ErrorCode.FILE_EXISTS
    assert await code_of(client.file.mkdir(rel(ws, "x/y"))) == ErrorCode.FILE_NOT_FOUND
    await client.file.mkdir(rel(ws, "x/y/z"), recursive=True)
    await client.file.mkdir(rel(ws, "x/y/z"), recursive=True)  # like mkdir -p
    (ws / "x/y/z/f").write_bytes(b"f")
    file_in_way = client.file.mkdir(rel(ws, "x/y/z/f"), recursive=True)
    assert await code_of(file_in_way) == ErrorCode.FILE_EXISTS
    assert await code_of(client.file.mkdir(rel(ws, "x/y/z/f/g"))) == ErrorCode.NOT_A_DIRECTORY

    assert await code_of(client.file.delete(rel(ws, "x"))) == ErrorCode.IS_A_DIRECTORY
    assert (ws / "x/y/z/f").exists()
    await client.file.delete(rel(ws, "x"), recursive=True)
    assert not (ws / "x").exists()
    await client.file.write(rel(ws, "file"), b"1")
    await client.file.delete(rel(ws, "file"))
    assert await code_of(client.file.delete(rel(ws, "file"))) == ErrorCode.FILE_NOT_FOUND
    assert await code_of(client.file.delete("/proc/version")) == ErrorCode.PERMISSION_DENIED


async def test_move_within_and_across_filesystems(client: Client, ws: Path) -> None:
    (ws / "a").mkdir()
    (ws / "b").mkdir()
    (ws / "a/f").write_bytes(b"one")
    moved = await client.file.move(rel(ws, "a/f"), rel(ws, "b/g"))
    assert moved["path"] == str(ws / "b/g")
    assert (ws / "b/g").read_bytes() == b"one" and not (ws / "a/f").exists()

    (ws / "a/f").write_bytes(b"two")
    refused = client.file.move(rel(ws, "a/f"), rel(ws, "b/g"))
    assert await code_of(refused) == ErrorCode.FILE_EXISTS
    assert (ws / "b/g").read_bytes() == b"one"
    await client.file.move(rel(ws, "a/f"), rel(ws, "b/g"), overwrite=True)
    assert (ws / "b/g").read_bytes() == b"two"
    assert await code_of(client.file.move(rel(ws, "a/f"), rel(ws, "c"))) == ErrorCode.FILE_NOT_FOUND

    shm = Path("/dev/shm") / f"supervisor-test-{uuid.uuid4().hex[:8]}"
    try:
        (ws / "tree/sub").mkdir(parents=True)
        (ws / "tree/sub/data").write_bytes(b"across")
        (ws / "tree/link").symlink_to("sub/data")
        await client.file.move(rel(ws, "tree"), str(shm))
        assert (shm / "sub/data").read_bytes() == b"across"
        assert os.readlink(shm / "link") == "sub/data"
        assert not (ws / "tree").exists()
        (ws / "solo").write_bytes(b"s")
        (shm / "solo").write_bytes(b"taken")
        blocked = client.file.move(rel(ws, "solo"), str(shm / "solo"))
        assert await code_of(blocked) == ErrorCode.FILE_EXISTS
        await client.file.move(rel(ws, "solo"), str(shm / "solo"), overwrite=True)
        assert (shm / "solo").read_bytes() == b"s"
        assert temp_files(shm) == [] and temp_files(ws) == []
    finally:
        await trio.run_process(["rm", "-rf", str(shm)])


async def test_invalid_paths(client: Client) -> None:
    for call in (
        client.file.read("a\0b"),
        client.file.write("", b""),
        client.file.stat("x\0"),
        client.file.exists("\0"),
        client.file.list("\0"),
        client.file.move("a", "b\0"),
        client.file.delete("/"),
    ):
        assert await code_of(call) == ErrorCode.VALIDATION_FAILED


@contextlib.contextmanager
def tmpfs(path: Path, options: str) -> Iterator[Path]:
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)])
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


async def test_disk_full_and_read_only_name_the_errno(client: Client, ws: Path) -> None:
    with tmpfs(ws / "small", "size=64k") as small:
        full = client.file.write(str(small / "big"), b"x" * MiB)
        with pytest.raises(SupervisorError) as info:
            await full
        assert (info.value.code, info.value.context["errno"]) == ("FILESYSTEM_ERROR", "ENOSPC")
        assert list(small.iterdir()) == []  # the temporary file is gone too
        (small / "kept").write_bytes(b"k")
        await trio.run_process(["mount", "-o", "remount,ro", str(small)])
        with pytest.raises(SupervisorError) as info:
            await client.file.delete(str(small / "kept"))
        assert (info.value.code, info.value.context["errno"]) == ("FILESYSTEM_ERROR", "EROFS")
