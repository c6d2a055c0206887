"""Readiness probes: does a TCP port accept a connection; what status does an HTTP GET get.

Any connection error means "not yet" (None or False), never an exception.
"""

from __future__ import annotations

import socket

import trio

_MAX_HEAD = 16 * 1024


async def tcp_accepts(host: str, port: int) -> bool:
    """Cancellation: abandons the attempt."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = trio.socket.socket(family, socket.SOCK_STREAM)
    try:
        await sock.connect((host, port))
        return True
    except OSError:
        return False
    finally:
        sock.close()


async def http_status(host: str, port: int, path: str) -> int | None:
    """The status code of `GET path` (HTTP/1.1, Host header set), or None on any failure.
    The caller bounds the time it may take.

    Cancellation: abandons the request.
    """
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: sandbox-supervisor\r\n"
        "Accept: */*\r\nConnection: close\r\n\r\n"
    ).encode("latin-1")
    try:
        stream = await trio.open_tcp_stream(host, port)
    except OSError:
        return None
    async with stream:
        try:
            await stream.send_all(request)
            head = b""
            while b"\r\n" not in head and len(head) < _MAX_HEAD:
                data = await stream.receive_some(4096)
                if not data:
                    break
                head += data
        except (OSError, trio.BrokenResourceError):
            return None
    status_line = head.split(b"\r\n", 1)[0].split()
    if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/"):
        return None
    code = status_line[1]
    return int(code) if code.isdigit() and len(code) == 3 else None
