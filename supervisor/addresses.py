"""Listener and connect addresses: `unix:/path`, `tcp:HOST:PORT` and `http:HOST:PORT`."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

SOCKET_NAME = "sandbox-supervisor.sock"


@dataclass(frozen=True)
class UnixAddress:
    path: str

    def __str__(self) -> str:
        return f"unix:{self.path}"


@dataclass(frozen=True)
class TcpAddress:
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"tcp:{host}:{self.port}"

    @property
    def is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False  # a host name could resolve anywhere: treat it as exposed


@dataclass(frozen=True)
class HttpAddress(TcpAddress):
    """The HTTP and WebSocket front: health checks, `/rpc`, `/terminals/ID`. A client given
    one speaks the protocol over a WebSocket to `/rpc` (`ws://HOST:PORT/rpc` means the same).
    """

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http:{host}:{self.port}"


Address = UnixAddress | TcpAddress | HttpAddress


def parse_address(text: str) -> Address:
    """Parse `unix:/path`, `tcp:HOST:PORT` or `http:HOST:PORT` (IPv6 hosts in brackets), or
    `ws://HOST:PORT/rpc`; ValueError for anything else."""
    if text.startswith("ws://"):
        authority, _, path = text[len("ws://") :].partition("/")
        if path not in ("", "rpc"):
            raise ValueError(f"address {text!r}: the protocol's WebSocket path is /rpc")
        return HttpAddress(*_host_port(text, authority))
    scheme, sep, rest = text.partition(":")
    if not sep or not rest:
        raise ValueError(f"address {text!r} must look like unix:/path or tcp:HOST:PORT")
    if scheme == "unix":
        return UnixAddress(rest)
    if scheme == "tcp":
        return TcpAddress(*_host_port(text, rest))
    if scheme == "http":
        return HttpAddress(*_host_port(text, rest))
    raise ValueError(f"address {text!r}: unknown scheme {scheme!r} (use unix:, tcp: or http:)")


def _host_port(text: str, rest: str) -> tuple[str, int]:
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"address {text!r} must look like SCHEME:HOST:PORT with PORT 0..65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def default_socket_path() -> str:
    """Where the daemon listens and the client connects when told nothing.

    `/run` when it is writable (a container, or root); else `$XDG_RUNTIME_DIR`; else `/tmp`
    with the user id in the name so that two users never share one path.
    """
    if os.access("/run", os.W_OK):
        return f"/run/{SOCKET_NAME}"
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir and os.access(runtime_dir, os.W_OK):
        return str(Path(runtime_dir) / SOCKET_NAME)
    return f"/tmp/sandbox-supervisor-{os.getuid()}.sock"


def default_address() -> Address:
    """The client's default: `SUPERVISOR_ADDRESS`, else the default socket."""
    configured = os.environ.get("SUPERVISOR_ADDRESS")
    if configured:
        return parse_address(configured)
    return UnixAddress(default_socket_path())
