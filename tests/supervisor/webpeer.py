"""Raw HTTP and WebSocket peers for the HTTP front's tests: real sockets, no client library."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from supervisor.addresses import HttpAddress, parse_address
from supervisor.sockio import SocketIO
from supervisor.websocket import WebSocket, WebSocketSettings, connect


def host_port(http: str | None) -> tuple[str, int]:
    address = parse_address(str(http))
    assert isinstance(address, HttpAddress)
    return address.host, address.port


async def http_request(http: str | None, raw: bytes) -> tuple[int, dict[str, Any] | None]:
    """Send raw bytes; return the status and the JSON body (if any) of the answer."""
    host, port = host_port(http)
    stream = await trio.open_tcp_stream(host, port)
    async with stream:
        await stream.send_all(raw)
        data = b""
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, (json.loads(body) if body.strip() else None)


async def get(http: str | None, path: str, headers: str = "") -> tuple[int, Any]:
    host, port = host_port(http)
    return await http_request(
        http, f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{headers}\r\n".encode()
    )


@asynccontextmanager
async def websocket(
    http: str | None,
    path: str,
    *,
    subprotocols: list[str] | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> AsyncIterator[WebSocket]:
    host, port = host_port(http)
    io = SocketIO(await trio.open_tcp_stream(host, port))
    try:
        ws = await connect(
            io,
            f"{host}:{port}",
            path,
            subprotocols=subprotocols,
            headers=headers,
            settings=WebSocketSettings(max_message=64 * 1024 * 1024),
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(io.flush_forever)
            yield ws
            nursery.cancel_scope.cancel()
    finally:
        await io.aclose()


async def next_control(ws: WebSocket, wanted: str) -> tuple[dict[str, Any], bytes]:
    """Read until a text message of type `wanted`; return it and the output seen before it."""
    output = b""
    with trio.fail_after(20):
        while (message := await ws.receive()) is not None:
            if isinstance(message, bytes):
                output += message
                continue
            control = json.loads(message)
            if control["type"] == wanted:
                return control, output
    raise AssertionError(f"closed before a {wanted!r} message; output {output[-200:]!r}")


async def read_until(ws: WebSocket, needle: bytes) -> tuple[bytes, str | None]:
    """Output until `needle` appears; also the last cursor seen."""
    output, cursor = b"", None
    with trio.fail_after(20):
        while needle not in output:
            message = await ws.receive()
            assert message is not None, f"closed; output so far {output[-300:]!r}"
            if isinstance(message, bytes):
                output += message
            elif json.loads(message)["type"] == "cursor":
                cursor = json.loads(message)["cursor"]
    return output, cursor
