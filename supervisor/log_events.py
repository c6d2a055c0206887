"""Ring log items as wire events, and wire cursors back into log positions.

Processes and terminals stream their logs the same way; only the event shape differs
(`stdout`/`stderr` events for a process, `data` events carrying `terminal_id` for a terminal).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from protocol import Cursor, ErrorCode, Payload, SupervisorError

from .clock import timestamp
from .ringlog import Chunk, End, Gap, RingLog, Run

#: Output bytes one event carries at most: consecutive chunks of one stream are joined up to
#: this, well below any `max_frame`.
EVENT_BYTES = 1024 * 1024


@dataclass(frozen=True)
class EventStyle:
    #: The key naming the resource in error contexts, and in events when `tag_events`.
    id_field: str
    tag_events: bool
    #: The event type of output chunks; None means the chunk's stream name.
    chunk_type: str | None
    bad_cursor: ErrorCode


PROCESS_EVENTS = EventStyle("process_id", False, None, ErrorCode.INVALID_PROCESS_CURSOR)
TERMINAL_EVENTS = EventStyle("terminal_id", True, "data", ErrorCode.INVALID_TERMINAL_CURSOR)


def to_event(
    style: EventStyle, resource_id: str, item: Run | Gap | End, ended_at: str | None
) -> dict[str, Any]:
    event: dict[str, Any]
    if isinstance(item, Run):
        event = {
            "type": style.chunk_type or item.stream,
            "cursor": str(Cursor(resource_id, item.end)),
            "timestamp": timestamp(item.time),
        }
    elif isinstance(item, Gap):
        event = {
            "type": "truncated",
            "cursor": str(Cursor(resource_id, item.position)),
            "timestamp": timestamp(),
            "dropped_bytes": item.dropped,
        }
    else:
        event = {
            **item.completion,
            "cursor": str(Cursor(resource_id, item.position)),
            "timestamp": ended_at or timestamp(),
        }
    if style.tag_events:
        event[style.id_field] = resource_id
    if isinstance(item, Run):
        # Last, so that a stream frame carries the parts as they are (see `Payload`).
        event["data"] = Payload(item.parts)
    return event


def cursor_position(style: EventStyle, resource_id: str, log: RingLog, since: str) -> int:
    """The log position a `since` cursor resumes from; the style's cursor error if invalid."""

    def bad(reason: str) -> SupervisorError:
        return SupervisorError(
            style.bad_cursor,
            f"invalid cursor for {resource_id}: {reason}",
            {style.id_field: resource_id, "cursor": since, "reason": reason},
        )

    cursor = Cursor.parse(since)
    if cursor is None:
        raise bad("malformed")
    if cursor.resource != resource_id:
        raise bad(f"the cursor belongs to {cursor.resource}")
    if not log.valid_position(cursor.position):
        raise bad("the cursor is ahead of the log")
    return cursor.position


async def stream_log(
    style: EventStyle,
    resource_id: str,
    log: RingLog,
    *,
    since: str | None,
    replay: bool,
    follow: bool,
    ended_at: Callable[[], str | None],
    send: Callable[[dict[str, Any]], Awaitable[None]],
) -> dict[str, Any]:
    """Send log events from `since` (or the start, or only live ones without `replay`);
    with `follow`, until the terminal event. Returns `{cursor}` of the last event sent.

    Cancellation: ends the stream only; the resource is untouched.
    """
    position = 0 if since is None else cursor_position(style, resource_id, log, since)
    if not replay:
        position = log.end  # live output only (and the end, if it has come)
    last = None
    with log.reader(position, follow=follow, holding=True) as reader:
        while (item := await reader.next()) is not None:
            run_or_mark = reader.extend(item, EVENT_BYTES) if isinstance(item, Chunk) else item
            event = to_event(style, resource_id, run_or_mark, ended_at())
            await send(event)
            last = event["cursor"]
    return {"cursor": last}
