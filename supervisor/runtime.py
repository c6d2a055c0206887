"""The runtime's identity, and the `runtime.*` methods that report it."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from protocol import PROTOCOL_VERSIONS

from . import SERVER_NAME
from .addresses import Address
from .clock import timestamp
from .rpc import Methods, NoParams


@dataclass
class Runtime:
    """Who this daemon is. A new random instance id on every start."""

    instance: str = field(default_factory=lambda: secrets.token_hex(8))
    started_at: str = field(default_factory=timestamp)
    _started: float = field(default_factory=time.monotonic)
    listeners: list[Address] = field(default_factory=list)
    capabilities: list[str] = field(default_factory=list)
    #: Counters other parts of the daemon expose, e.g. {"port_queries": ...}.
    counters: dict[str, Callable[[], int]] = field(default_factory=dict)

    @property
    def uptime(self) -> float:
        return time.monotonic() - self._started

    def info(self) -> dict[str, Any]:
        return {
            "instance": self.instance,
            "server": SERVER_NAME,
            "protocol_versions": list(PROTOCOL_VERSIONS),
            "pid": os.getpid(),
            "pid1": os.getpid() == 1,
            "started_at": self.started_at,
            "uptime": round(self.uptime, 3),
            "capabilities": list(self.capabilities),
            "listeners": [str(address) for address in self.listeners],
            "counters": {name: read() for name, read in self.counters.items()},
        }


def register(methods: Methods, runtime: Runtime) -> None:
    def ping(params: NoParams) -> dict[str, Any]:
        return {"instance": runtime.instance}

    def info(params: NoParams) -> dict[str, Any]:
        return runtime.info()

    methods.add_sync("runtime.ping", NoParams, ping)
    methods.add_sync("runtime.info", NoParams, info)
