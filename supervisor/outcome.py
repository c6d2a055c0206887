"""How a supervised launch (a process or a terminal) ended, once it has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import trio

from protocol import ErrorCode, SupervisorError

from .clock import timestamp
from .ringlog import RingLog


@dataclass(frozen=True)
class Exit:
    code: int
    signal: int | None
    timed_out: bool

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.code, "signal": self.signal, "timed_out": self.timed_out}


class Outcome:
    """`running` until `finish()` (an exit) or `fail()` (the daemon could not supervise it);
    either closes the log with its terminal event and sets `finished`."""

    def __init__(self, log: RingLog) -> None:
        self.log = log
        self.started_at = timestamp()
        self.ended_at: str | None = None
        self.exit: Exit | None = None
        self.error: dict[str, str] | None = None
        self.finished = trio.Event()

    @property
    def state(self) -> str:
        if self.exit is not None:
            return "exited"
        if self.error is not None:
            return "error"
        return "running"

    def outcome_fields(self) -> dict[str, Any]:
        """The snapshot keys that describe the ending: `ended_at`, `exit` or `error`."""
        fields: dict[str, Any] = {}
        if self.ended_at is not None:
            fields["ended_at"] = self.ended_at
        if self.exit is not None:
            fields["exit"] = self.exit.to_wire()
        if self.error is not None:
            fields["error"] = self.error
        return fields

    def exit_or_raise(self) -> dict[str, Any]:
        """The exit on the wire once finished; raises the error if supervision failed."""
        if self.exit is None:
            assert self.error is not None, "not finished"
            raise SupervisorError(self.error["code"], self.error["message"])
        return self.exit.to_wire()

    def finish(self, exit: Exit) -> None:
        self.exit = exit
        self.ended_at = timestamp()
        self.log.close({"type": "terminal", "state": "exited", "exit": exit.to_wire()})
        self.finished.set()

    def conclude(self, exit: Exit, output_error: OSError | None) -> None:
        """End once the output is drained: `finish(exit)`, or `fail` if reading the output
        broke (what the log holds is then not known to be everything)."""
        if output_error is None:
            self.finish(exit)
        else:
            self.fail(ErrorCode.INTERNAL_ERROR, f"reading the output failed: {output_error}")

    def fail(self, code: str, message: str) -> None:
        self.error = {"code": code, "message": message}
        self.ended_at = timestamp()
        self.log.close({"type": "terminal", "state": "error", "error": self.error})
        self.finished.set()
