"""Method dispatch, and the one place where exceptions become error replies.

Handlers are `async def handler(params, call) -> result`. `params` is the method's schema
dataclass, already validated; `call.send_event()` streams events before the final result.
A method that never waits registers a plain `def handler(params) -> result` with `add_sync`:
the server answers it inline, without a task, a cancel scope or a task switch (see the
Performance section of the README).
Handlers raise `SupervisorError` for failures the client should see; anything else is logged
with its traceback and answered with a bare INTERNAL_ERROR.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import trio

from protocol import ErrorCode, Request, SupervisorError, parse

log = logging.getLogger(__name__)

P = TypeVar("P")


class ConnectionScope:
    """What lives as long as one client connection: `on_close` callbacks run when it ends,
    however it ends (for example, to remove the temporary file of an unfinished upload)."""

    def __init__(self) -> None:
        self._closers: list[Callable[[], None]] = []

    def on_close(self, closer: Callable[[], None]) -> None:
        self._closers.append(closer)

    def close(self) -> None:
        closers, self._closers = self._closers, []
        for closer in reversed(closers):
            try:
                closer()
            except Exception:
                log.exception("cleaning up after a connection failed")


class Call:
    """One request being answered: its id, its connection's scope, and a way to stream
    events to the caller."""

    def __init__(
        self,
        request_id: int,
        send_event: Callable[[dict[str, Any]], Awaitable[None]],
        connection: ConnectionScope | None = None,
    ):
        self.id = request_id
        self._send_event = send_event
        self.connection = connection or ConnectionScope()

    async def send_event(self, event: dict[str, Any]) -> None:
        """Queue one event for the caller; blocks while the connection's send buffer is full."""
        await self._send_event(event)


Handler = Callable[[P, Call], Awaitable[Any]]
SyncHandler = Callable[[P], Any]


class _NotYet:
    def __repr__(self) -> str:
        return "NOT_YET"


#: What an `at_once` handler returns when the answer needs a wait after all.
NOT_YET: Any = _NotYet()


@dataclass(frozen=True)
class Method(Generic[P]):
    name: str
    params: type[P]
    handler: Handler[P] | None = None
    sync_handler: SyncHandler[P] | None = None


@dataclass(frozen=True)
class NoParams:
    """For methods that take no parameters (unknown keys are still ignored)."""


class Methods:
    """The method table. Domain modules add their methods; the server dispatches to them."""

    def __init__(self) -> None:
        self._methods: dict[str, Method[Any]] = {}

    def add(
        self,
        name: str,
        params: type[P],
        handler: Handler[P],
        *,
        at_once: SyncHandler[P] | None = None,
    ) -> None:
        """A method that may wait. `at_once`, if given, answers inline when the answer is
        already there (a wait on something that has happened), or returns NOT_YET: only then
        does `handler` run, in a task of its own."""
        self._add(Method(name, params, handler=handler, sync_handler=at_once))

    def add_sync(self, name: str, params: type[P], handler: SyncHandler[P]) -> None:
        """A method whose handler never waits: answered inline, in the connection's reader."""
        self._add(Method(name, params, sync_handler=handler))

    def _add(self, method: Method[Any]) -> None:
        if method.name in self._methods:
            raise ValueError(f"method {method.name} is already registered")
        self._methods[method.name] = method

    def answers_at_once(self, name: str) -> bool:
        method = self._methods.get(name)
        return method is not None and method.sync_handler is not None

    def answer(self, request: Request) -> Any:
        """Run a method's sync handler (see `answers_at_once`); NOT_YET from a method that
        must wait after all."""
        method = self._methods[request.method]
        assert method.sync_handler is not None
        return method.sync_handler(parse(method.params, request.params))

    @property
    def names(self) -> list[str]:
        return sorted(self._methods)

    @property
    def namespaces(self) -> list[str]:
        return sorted({name.partition(".")[0] for name in self._methods})

    async def dispatch(self, request: Request, call: Call) -> Any:
        method = self._methods.get(request.method)
        if method is None:
            raise SupervisorError(
                ErrorCode.METHOD_NOT_FOUND,
                f"no method named {request.method!r}",
                {"method": request.method},
            )
        assert method.handler is not None, "sync-only methods are answered with answer()"
        return await method.handler(parse(method.params, request.params), call)


@contextlib.contextmanager
def wait_deadline(timeout_ms: int | None, error: Callable[[], SupervisorError]) -> Iterator[None]:
    """The wire's `timeout_ms` for a wait, as a cancel scope at the edge: when it expires the
    wait ends with `error()`. What was waited on is never touched."""
    if timeout_ms is None:
        yield
        return
    with trio.move_on_after(timeout_ms / 1000) as scope:
        yield
    if scope.cancelled_caught:
        raise error()


def error_for(exc: BaseException, request: Request) -> SupervisorError:
    """The error reply for a failed request. Tracebacks go to the log, never to the client."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]  # a handler's own nursery wraps what it raised
    if isinstance(exc, SupervisorError):
        return exc
    log.error("internal error in %s (request %d)", request.method, request.id, exc_info=exc)
    return SupervisorError(
        ErrorCode.INTERNAL_ERROR,
        f"internal error in {request.method}; see the daemon log",
        {"method": request.method},
    )


def cancelled_error(request: Request, reason: str) -> SupervisorError:
    code = ErrorCode.SHUTTING_DOWN if reason == "shutdown" else ErrorCode.CANCELLED
    message = "the daemon is shutting down" if reason == "shutdown" else "request cancelled"
    return SupervisorError(code, message, {"method": request.method})
