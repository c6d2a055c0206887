"""The listening sockets: Unix sockets with mode 0600 and stale-file recovery, and TCP."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import stat
from collections.abc import Iterator

import trio

from .addresses import Address, HttpAddress, TcpAddress, UnixAddress

log = logging.getLogger(__name__)

BACKLOG = 1024


class ListenError(Exception):
    """A listener could not be opened; the message says why in a person's words."""


def _unix_socket_is_live(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError as exc:
        if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
            return False
        raise
    finally:
        probe.close()
    return True


def _claim_unix_path(path: str) -> None:
    """Remove a stale socket file left by a dead daemon; never steal a live one."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ListenError(f"{path} exists and is not a socket; refusing to replace it")
    if _unix_socket_is_live(path):
        raise ListenError(f"another daemon is already listening on {path}")
    log.info("removing stale socket %s", path)
    os.unlink(path)


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _open_unix(address: UnixAddress) -> socket.socket:
    path = address.path
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        raise ListenError(f"cannot listen on {address}: directory {directory} does not exist")
    _claim_unix_path(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # The umask makes the socket 0600 from its first instant; chmod states it again.
        with _umask(0o177):
            sock.bind(path)
        os.chmod(path, 0o600)
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise ListenError(f"cannot listen on {address}: {exc.strerror}") from None
    return sock


def _open_tcp(address: TcpAddress) -> socket.socket:
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address.host, address.port))
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise ListenError(f"cannot listen on {address}: {exc.strerror}") from None
    return sock


class Listeners:
    """Owns the daemon's listening sockets and the Unix socket files they created."""

    def __init__(self) -> None:
        self.trio_listeners: list[trio.SocketListener] = []
        #: The `http:` ones, served by the HTTP front rather than the stream protocol.
        self.http_listeners: list[trio.SocketListener] = []
        self.bound: list[Address] = []
        self._unix_paths: list[str] = []

    def open(self, addresses: list[Address]) -> None:
        """Bind every address, or none: on failure the ones already open are closed."""
        try:
            for address in addresses:
                if isinstance(address, UnixAddress):
                    sock = _open_unix(address)
                    self._unix_paths.append(address.path)
                    bound: Address = address
                else:
                    sock = _open_tcp(address)
                    bound = type(address)(address.host, sock.getsockname()[1])
                listener = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
                if isinstance(address, HttpAddress):
                    self.http_listeners.append(listener)
                else:
                    self.trio_listeners.append(listener)
                self.bound.append(bound)
        except BaseException:
            self.remove_socket_files()
            for listener in [*self.trio_listeners, *self.http_listeners]:
                listener.socket.close()
            raise

    def remove_socket_files(self) -> None:
        for path in self._unix_paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self._unix_paths.clear()
