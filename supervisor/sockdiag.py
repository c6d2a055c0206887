"""The kernel's table of listening TCP sockets, read with a netlink sock_diag query.

One query per address family asks only for sockets in the LISTEN state, so its cost does not
grow with the number of connections (reading /proc/net/tcp walks the whole hash table: about
4.5 ms of kernel time per read on the reference machine, against microseconds here).
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 0x1
_NLM_F_DUMP = 0x300
_NLMSG_ERROR = 2
_NLMSG_DONE = 3
_TCP_LISTEN = 10

_NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_REQUEST = struct.Struct("=BBBBI48x")  # family, protocol, ext, pad, states, sockid (zeros)
# inet_diag_msg: family, state, timer, retrans, then inet_diag_sockid: sport, dport (big
# endian), src[16], dst[16], interface, cookie[2]; then expires, rqueue, wqueue, uid, inode.
_MSG_HEAD = struct.Struct("=BBBB")
_PORT = struct.Struct(">H")
_INODE_OFFSET = 4 + 48 + 16


@dataclass(frozen=True, order=True)
class Listener:
    port: int
    address: str
    family: str  # "ipv4" or "ipv6"
    inode: int

    def to_wire(self) -> dict[str, object]:
        return {"port": self.port, "address": self.address, "family": self.family}


class SockDiag:
    """A netlink socket for listening-socket queries. Blocking calls; each takes microseconds."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG)
        self._seq = 0

    def close(self) -> None:
        self._sock.close()

    def listeners(self) -> frozenset[Listener]:
        return self._query(socket.AF_INET) | self._query(socket.AF_INET6)

    def _query(self, family: int) -> frozenset[Listener]:
        self._seq += 1
        request = _REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, 1 << _TCP_LISTEN)
        header = _NLMSG.pack(
            _NLMSG.size + len(request),
            _SOCK_DIAG_BY_FAMILY,
            _NLM_F_REQUEST | _NLM_F_DUMP,
            self._seq,
            0,
        )
        self._sock.send(header + request)
        found: set[Listener] = set()
        while True:
            data = self._sock.recv(1 << 16)
            offset = 0
            while offset + _NLMSG.size <= len(data):
                length, kind, _, seq, _ = _NLMSG.unpack_from(data, offset)
                if kind == _NLMSG_DONE and seq == self._seq:
                    return frozenset(found)
                if kind == _NLMSG_ERROR:
                    (errno,) = struct.unpack_from("=i", data, offset + _NLMSG.size)
                    raise OSError(-errno, "sock_diag query failed")
                if seq == self._seq:
                    found.add(_parse(data, offset + _NLMSG.size))
                offset += (length + 3) & ~3


def _parse(data: bytes, at: int) -> Listener:
    family = _MSG_HEAD.unpack_from(data, at)[0]
    (port,) = _PORT.unpack_from(data, at + 4)
    raw = data[at + 8 : at + 8 + (4 if family == socket.AF_INET else 16)]
    (inode,) = struct.unpack_from("=I", data, at + _INODE_OFFSET)
    name = "ipv4" if family == socket.AF_INET else "ipv6"
    return Listener(port, socket.inet_ntop(family, raw), name, inode)
