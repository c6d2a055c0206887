"""The file commands of the `supervisor` command line: cat, ls, cp, watch.

`cp` names the daemon's side with a leading `:` (as `docker cp` names a container's), so a
person connected over TCP moves files in and out: `supervisor cp report.csv :data/`,
`supervisor cp :out/chart.png .`.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import trio

from protocol import ErrorCode, SupervisorError

from ._file_calls import CHUNK_BYTES
from .client import Client

Action = Callable[[argparse.Namespace, Client], Awaitable[int]]


def add_commands(client_command: Callable[[str, str], argparse.ArgumentParser]) -> None:
    cat = client_command("cat", "print a file of the daemon's filesystem")
    cat.add_argument("path")
    ls = client_command("ls", "list a directory of the daemon's filesystem")
    ls.add_argument("path", nargs="?", default=".")
    ls.add_argument("-R", "--recursive", action="store_true")
    ls.add_argument("-a", "--all", action="store_true", help="include hidden entries")
    cp = client_command("cp", "copy a file in or out: a ':' prefix names the daemon's side")
    cp.add_argument("source", help="local path, or :remote path")
    cp.add_argument("destination", help="local path, or :remote path (a directory: keep name)")
    watch = client_command("watch", "print filesystem events under a path until interrupted")
    watch.add_argument("path", nargs="?", default=".")
    watch.add_argument("--include", action="append", metavar="GLOB", help="repeatable")
    watch.add_argument("--exclude", action="append", metavar="GLOB", help="repeatable")
    watch.add_argument("--no-recursive", action="store_true")


async def _cat(args: argparse.Namespace, client: Client) -> int:
    out = sys.stdout.buffer
    async for chunk in client.file.read_chunks(args.path):
        out.write(chunk)
    out.flush()
    return 0


def _mode_string(entry: dict[str, Any]) -> str:
    kind = {"directory": stat.S_IFDIR, "symlink": stat.S_IFLNK, "file": stat.S_IFREG}
    return stat.filemode(kind.get(entry["type"], 0) | entry["mode"])


async def _ls(args: argparse.Namespace, client: Client) -> int:
    listing = await client.file.list(args.path, recursive=args.recursive, hidden=args.all)
    if args.json:
        print(json.dumps(listing, indent=2))
        return 0
    root = listing["path"]
    for entry in listing["entries"]:
        name = entry["path"][len(root) :].lstrip("/")
        if entry["type"] == "directory":
            name += "/"
        elif "target" in entry:
            name += f" -> {entry['target']}"
        when = entry["modified_at"][:19].replace("T", " ")
        print(f"{_mode_string(entry)} {entry['size']:>12} {when}  {name}")
    if listing["truncated"]:
        print(f"[listing cut at {len(listing['entries'])} entries]", file=sys.stderr)
    return 0


def _remote(path: str) -> str | None:
    return path[1:] if path.startswith(":") else None


async def _local_chunks(path: str) -> AsyncIterator[bytes]:
    async with await trio.open_file(path, "rb") as f:
        while chunk := await f.read(CHUNK_BYTES):
            yield chunk


async def _cp(args: argparse.Namespace, client: Client) -> int:
    source, destination = _remote(args.source), _remote(args.destination)
    if (source is None) == (destination is None):
        raise SupervisorError(
            ErrorCode.VALIDATION_FAILED, "exactly one side must be remote (a ':path')"
        )
    if destination is not None:  # upload
        info = await trio.Path(args.source).stat()
        if stat.S_ISDIR(info.st_mode):
            raise SupervisorError(ErrorCode.IS_A_DIRECTORY, f"{args.source}: is a directory")
        name = os.path.basename(args.source)
        if destination in ("", ".") or destination.endswith("/"):
            destination += name
        elif await client.file.exists(destination):
            existing = await client.file.stat(destination)
            if existing["type"] == "directory":
                destination = f"{destination}/{name}"
        result = await client.file.write_chunks(
            destination, _local_chunks(args.source), mode=stat.S_IMODE(info.st_mode)
        )
        if not args.json:
            return 0
        print(json.dumps(result))
        return 0
    assert source is not None
    remote = await client.file.stat(source)
    if remote["type"] == "directory":
        raise SupervisorError(ErrorCode.IS_A_DIRECTORY, f"{source}: is a directory")
    target = trio.Path(args.destination)
    if await target.is_dir():
        target = target / os.path.basename(source)
    # Written beside the target and renamed over it: an interrupted copy leaves no torn file.
    partial = target.with_name(f".{target.name}.partial")
    try:
        async with await trio.open_file(partial, "wb") as f:
            async for chunk in client.file.read_chunks(source):
                await f.write(chunk)
        await partial.chmod(remote["mode"])
        await partial.rename(target)
    except BaseException:
        with trio.CancelScope(shield=True):
            await partial.unlink(missing_ok=True)
        raise
    return 0


async def _watch(args: argparse.Namespace, client: Client) -> int:
    async with client.file.watch(
        args.path, recursive=not args.no_recursive, include=args.include, exclude=args.exclude
    ) as events:
        async for event in events:
            if args.json:
                print(json.dumps(event), flush=True)
            elif event["type"] == "watching":
                print(f"watching {event['path']}", file=sys.stderr, flush=True)
            elif event["type"] == "event":
                slash = "/" if event["is_directory"] else ""
                print(f"{event['event_type']:<9} {event['path']}{slash}", flush=True)
            else:
                print(f"[{event['type']}: {event.get('reason') or event.get('error')}]", flush=True)
    return 0


ACTIONS: dict[str, Action] = {"cat": _cat, "ls": _ls, "cp": _cp, "watch": _watch}
