"""The kernel's signalfd, through ctypes: blocked signals read as a descriptor.

Python has no binding for it, and the layer is two libc calls. The records read from the
descriptor are discarded: signals of one kind coalesce while pending anyway, so a reader
must treat a wake-up as "look again", never as a count.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Iterable

_libc = ctypes.CDLL(None, use_errno=True)
#: glibc's sigset_t: 1024 bits.
_SigSet = ctypes.c_ulong * (1024 // (8 * ctypes.sizeof(ctypes.c_ulong)))
_SIGINFO_SIZE = 128


def open_signalfd(signals: Iterable[signal.Signals]) -> int:
    """A non-blocking, close-on-exec descriptor that is readable while any of `signals` is
    pending. The caller blocks them (`signal.pthread_sigmask`), or they are delivered
    instead."""
    mask = _SigSet()
    _libc.sigemptyset(ctypes.byref(mask))
    for signum in signals:
        _libc.sigaddset(ctypes.byref(mask), int(signum))
    fd: int = _libc.signalfd(-1, ctypes.byref(mask), os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


def drain(fd: int) -> None:
    """Consume every pending record."""
    while True:
        try:
            os.read(fd, _SIGINFO_SIZE * 16)
        except BlockingIOError:
            return
