"""Resource ids and log cursors: opaque strings that embed the runtime instance.

Every daemon start has a random instance id. Ids and cursors carry it, so one handed out by a
previous daemon (a replaced container) is recognisably *stale*, not merely unknown.

    resource id   <kind>-<instance>-<sequence>        e.g. proc-3f9a2c1b7e4d5a60-17
    cursor        <resource id>:<position>            e.g. proc-3f9a2c1b7e4d5a60-17:4096

Clients must treat both as opaque; the format may change in a later protocol version.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

_INSTANCE = r"[0-9a-f]{16}"
_RESOURCE = re.compile(rf"(?P<kind>[a-z]+)-(?P<instance>{_INSTANCE})-(?P<seq>[1-9][0-9]{{0,18}})")
INSTANCE_PATTERN = re.compile(_INSTANCE)


class Provenance(enum.Enum):
    OURS = "ours"  # well formed, this instance: look it up
    STALE = "stale"  # well formed, another instance
    FOREIGN = "foreign"  # not an id of this kind at all


@dataclass(frozen=True)
class ResourceId:
    kind: str
    instance: str
    seq: int

    def __str__(self) -> str:
        return f"{self.kind}-{self.instance}-{self.seq}"

    @classmethod
    def parse(cls, text: str) -> ResourceId | None:
        match = _RESOURCE.fullmatch(text)
        if match is None:
            return None
        return cls(match["kind"], match["instance"], int(match["seq"]))


def provenance(text: str, kind: str, instance: str) -> tuple[Provenance, ResourceId | None]:
    rid = ResourceId.parse(text)
    if rid is None or rid.kind != kind:
        return Provenance.FOREIGN, None
    if rid.instance != instance:
        return Provenance.STALE, rid
    return Provenance.OURS, rid


@dataclass(frozen=True)
class Cursor:
    """A position in one resource's log: resuming *after* it means from `position` on."""

    resource: str
    position: int

    def __str__(self) -> str:
        return f"{self.resource}:{self.position}"

    @classmethod
    def parse(cls, text: str) -> Cursor | None:
        resource, sep, position = text.rpartition(":")
        if not sep or not position.isascii() or not position.isdigit() or len(position) > 19:
            return None
        if ResourceId.parse(resource) is None:
            return None
        return cls(resource, int(position))
