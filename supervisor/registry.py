"""Lookups of one kind of resource by id, and the retention of finished ones.

Ids embed the runtime instance, so an id from a previous daemon is told apart from an
unknown one: `find()` answers None for both (lookups never fail on missing work); `require()`
raises the kind's NOT_FOUND or STALE error.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from protocol import ErrorCode, Provenance, ResourceId, SupervisorError, provenance

T = TypeVar("T")


@dataclass(frozen=True)
class Kind:
    prefix: str  # in ids: "proc", "term"
    noun: str  # in messages: "process", "terminal"
    id_field: str  # in error contexts: "process_id", "terminal_id"
    not_found: ErrorCode
    stale: ErrorCode


class Registry(Generic[T]):
    def __init__(self, kind: Kind, instance: str, retain_finished: int) -> None:
        self.kind = kind
        self.instance = instance
        self._retain = retain_finished
        self._items: dict[str, T] = {}
        self._finished: collections.deque[str] = collections.deque()
        self._next_seq = 1

    def next_id(self) -> str:
        """An id for the next resource; taken only by `add()`, so a failed launch burns none."""
        return str(ResourceId(self.kind.prefix, self.instance, self._next_seq))

    def add(self, resource_id: str, item: T) -> None:
        assert resource_id == self.next_id()
        self._next_seq += 1
        self._items[resource_id] = item

    def __iter__(self) -> Iterator[T]:
        return iter(list(self._items.values()))

    def find(self, resource_id: str) -> T | None:
        origin, _ = provenance(resource_id, self.kind.prefix, self.instance)
        return self._items.get(resource_id) if origin is Provenance.OURS else None

    def require(self, resource_id: str, operation: str) -> T:
        kind = self.kind
        origin, _ = provenance(resource_id, kind.prefix, self.instance)
        context = {kind.id_field: resource_id, "operation": operation}
        if origin is Provenance.STALE:
            raise SupervisorError(
                kind.stale,
                f"{kind.noun} {resource_id} belongs to a previous daemon instance",
                context,
            )
        item = self._items.get(resource_id) if origin is Provenance.OURS else None
        if item is None:
            raise SupervisorError(
                kind.not_found, f"no {kind.noun} {resource_id} in this daemon", context
            )
        return item

    def retire(self, resource_id: str) -> None:
        """A resource finished: keep it, but only the newest `retain_finished` of them."""
        self._finished.append(resource_id)
        while len(self._finished) > self._retain:
            self._items.pop(self._finished.popleft(), None)
