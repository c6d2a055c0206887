"""A terminal on a browser's WebSocket (`/terminals/{id}`), in the shape xterm.js wants.

In: binary messages are keystrokes; text messages are JSON control, `{"type": "resize",
"cols": N, "rows": N}`. Out: binary messages are terminal output; text messages are JSON:
`{"type": "cursor", "cursor"}` after each output message (reconnect with `?cursor=` to get
only what came after it), `{"type": "ready", "cursor"}` once the buffered output has been
replayed, `{"type": "truncated", "dropped_bytes"}` when a slow browser fell behind the
terminal's buffer, `{"type": "exit", "code", "signal"}` and `{"type": "error", "message"}`.

A disconnect leaves the terminal running. A slow browser never holds the terminal back: it
reads the terminal's ring buffer at its own pace and is told what it missed.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from protocol import Cursor, SupervisorError, TerminalResizeParams, parse

from .log_events import TERMINAL_EVENTS, cursor_position
from .ringlog import Chunk, End, Gap
from .terminals import Terminal
from .websocket import POLICY_VIOLATION, WebSocket

FLUSH_GRACE = 5.0


Send = Callable[[dict[str, Any]], Awaitable[None]]


async def bridge(
    websocket: WebSocket,
    terminal: Terminal,
    *,
    cursor: str | None,
    size: TerminalResizeParams | None,
) -> None:
    """Run until either side ends. Cancellation: closes the WebSocket only."""

    async def send(message: dict[str, Any]) -> None:
        await websocket.send_text(json.dumps(message))

    try:
        position = 0
        if cursor is not None:
            position = cursor_position(TERMINAL_EVENTS, terminal.id, terminal.log, cursor)
        if size is not None and terminal.exit is None:
            terminal.resize(size.cols, size.rows)
    except SupervisorError as exc:
        await send({"type": "error", "message": exc.message, "code": exc.code})
        websocket.close(POLICY_VIOLATION, exc.code)
        with trio.move_on_after(FLUSH_GRACE):
            await websocket.io.flush()
        return
    async with trio.open_nursery() as nursery:

        async def writer() -> None:
            await websocket.io.flush_forever()
            nursery.cancel_scope.cancel()

        async def output() -> None:
            await _output(websocket, terminal, position, send)
            websocket.close()
            websocket.io.close_when_flushed()
            # The last messages get a moment to leave; a browser that reads nothing, no more.
            nursery.cancel_scope.deadline = trio.current_time() + FLUSH_GRACE

        async def input() -> None:
            await _input(websocket, terminal, send)
            nursery.cancel_scope.cancel()  # the browser went away: the terminal runs on

        nursery.start_soon(writer)
        nursery.start_soon(output)
        nursery.start_soon(input)
        nursery.start_soon(websocket.keep_alive)


async def _output(websocket: WebSocket, terminal: Terminal, position: int, send: Send) -> None:
    replayed_to = terminal.log.end
    ready = False

    async def mark_ready(at: int) -> None:
        nonlocal ready
        if not ready:
            ready = True
            await send({"type": "ready", "cursor": str(Cursor(terminal.id, at))})

    if position >= replayed_to:
        await mark_ready(position)
    with terminal.log.reader(position, follow=True) as reader:
        while (item := await reader.next()) is not None:
            if isinstance(item, Chunk):
                await websocket.send_bytes(item.data)
                await send({"type": "cursor", "cursor": str(Cursor(terminal.id, item.end))})
                if item.end >= replayed_to:
                    await mark_ready(item.end)
            elif isinstance(item, Gap):
                await send({"type": "truncated", "dropped_bytes": item.dropped})
            elif isinstance(item, End):
                await mark_ready(item.position)
                if terminal.exit is not None:
                    exit = terminal.exit
                    await send({"type": "exit", "code": exit.code, "signal": exit.signal})
                else:
                    message = (terminal.error or {}).get("message", "the terminal failed")
                    await send({"type": "error", "message": message})


async def _input(websocket: WebSocket, terminal: Terminal, send: Send) -> None:
    while (message := await websocket.receive()) is not None:
        try:
            if isinstance(message, bytes):
                await terminal.write(message)
                continue
            control = json.loads(message)
            if not isinstance(control, dict) or control.get("type") != "resize":
                raise ValueError('expected {"type": "resize", "cols": N, "rows": N}')
            # Checked exactly as the terminal.resize method checks its params.
            window = parse(TerminalResizeParams, {**control, "id": terminal.id})
            terminal.resize(window.cols, window.rows)
        except (ValueError, SupervisorError) as exc:
            text = exc.message if isinstance(exc, SupervisorError) else str(exc)
            await send({"type": "error", "message": text})
