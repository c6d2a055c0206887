"""`supervisor serve`: assemble the daemon, run it, and shut it down cleanly.

See `pid1` for the duties of a container's first process, in order.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import BinaryIO

import trio

from protocol import DEFAULT_MAX_FRAME, ServerPolicy, SupervisorError

from . import SERVER_NAME, pid1
from .addresses import Address, TcpAddress, UnixAddress, default_socket_path
from .epoll_hub import EpollHub
from .file_api import register as register_files
from .http_front import HttpFront
from .listeners import ListenError, Listeners
from .pid1 import Lifecycle
from .port_api import register as register_ports
from .ports import ListenerWatch
from .process_api import SandboxEnvironment
from .process_api import register as register_processes
from .processes import Process, ProcessSettings, ProcessTable
from .reaper import Reaper
from .ringlog import Chunk
from .rpc import Methods
from .runtime import Runtime
from .runtime import register as register_runtime
from .server import Server, ServerSettings
from .spawn import Launch
from .terminal_api import register as register_terminals
from .terminals import TerminalSettings, TerminalTable
from .tickets import Tickets
from .websocket import WebSocketSettings

log = logging.getLogger(__name__)

TOKEN_ENV = "SUPERVISOR_TOKEN"
#: How long the main command's last output may take to reach our stdout at shutdown.
TEE_FLUSH_TIMEOUT = 5.0


class ConfigError(Exception):
    """The daemon cannot start with this configuration; the message tells a person why."""


@dataclass(frozen=True)
class DaemonConfig:
    listen: list[Address] = field(default_factory=list)
    token: str | None = None
    max_frame: int = DEFAULT_MAX_FRAME
    handshake_timeout: float = 10.0
    processes: ProcessSettings = field(default_factory=ProcessSettings)
    terminals: TerminalSettings = field(default_factory=TerminalSettings)
    #: On shutdown, how long supervised processes get between SIGTERM and SIGKILL.
    stop_grace: float = 5.0
    #: The image's CMD: supervised like any process; its exit ends the daemon.
    main_command: list[str] = field(default_factory=list)
    #: Keep-alive and idle timeout of the HTTP front's WebSockets (max_message: max_frame).
    ws_ping_interval: float = 20.0
    ws_idle_timeout: float = 60.0

    def listeners(self) -> list[Address]:
        return self.listen or [UnixAddress(default_socket_path())]

    def check(self) -> None:
        exposed = [a for a in self.listeners() if isinstance(a, TcpAddress) and not a.is_loopback]
        if exposed and not self.token:
            names = ", ".join(map(str, exposed))
            raise ConfigError(
                f"refusing to listen on {names} without a token: anyone who can reach it could "
                f"run commands. Set {TOKEN_ENV} or pass --token-file PATH."
            )


def read_token(token_file: str | None) -> str | None:
    """The token from --token-file, else from the environment; then scrub the environment.

    The variable is removed from this process's environment so that no child inherits it.
    """
    from_env = os.environ.pop(TOKEN_ENV, None)
    if token_file is not None:
        try:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read token file {token_file}: {exc.strerror}") from None
        if not token:
            raise ConfigError(f"token file {token_file} is empty")
        return token
    return from_env or None


def _emit(out: BinaryIO, data: bytes) -> None:
    out.write(data)
    out.flush()


async def _tee(process: Process) -> None:
    """Copy the main command's output to the daemon's own stdout and stderr (what `docker
    logs` shows). Writes happen in a worker thread: a slow reader of our stdout must not stall
    the event loop."""
    outputs = {"stdout": sys.stdout.buffer, "stderr": sys.stderr.buffer}
    with process.log.reader(0, follow=True) as reader:
        while (item := await reader.next()) is not None:
            if isinstance(item, Chunk):
                await trio.to_thread.run_sync(_emit, outputs[item.stream], item.data)


def _start_main(
    processes: ProcessTable, environment: SandboxEnvironment, argv: list[str]
) -> Process:
    try:
        return processes.launch(
            Launch(argv, os.getcwd(), environment.for_launch({})),
            buffer_bytes=processes.settings.buffer_bytes,
            block=False,
            timeout=None,
            kill_grace=0,
        )
    except SupervisorError as exc:
        reason = str(exc.context.get("reason", exc.message))
        log.error("cannot start the main command %s: %s", argv, reason)
        raise MainCommandFailed(127 if "not found" in reason.lower() else 126) from None


class MainCommandFailed(Exception):
    def __init__(self, exit_code: int) -> None:
        super().__init__(exit_code)
        self.exit_code = exit_code


async def serve(
    config: DaemonConfig, *, task_status: trio.TaskStatus[Runtime] = trio.TASK_STATUS_IGNORED
) -> int:
    """Run the daemon until told to stop (SIGTERM, SIGINT, SIGQUIT) or until the main
    command exits; then shut down cleanly. Returns the exit code: the main command's (128+N
    after signal N), else 0.

    Cancellation: closes every connection at once and returns.
    """
    config.check()
    pid1.prepare()
    try:
        os.makedirs(config.processes.workspace, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create workspace {config.processes.workspace}: {exc.strerror}"
        ) from None

    identity = Runtime()
    reaper = Reaper()
    hub = EpollHub()
    processes = ProcessTable(identity.instance, reaper, hub, config.processes)
    terminals = TerminalTable(identity.instance, reaper, hub, config.terminals)
    environment = SandboxEnvironment(dict(os.environ))
    watch = ListenerWatch()
    identity.counters["port_queries"] = lambda: watch.queries
    methods = Methods()
    register_runtime(methods, identity)
    register_processes(methods, processes, environment)
    register_ports(methods, watch, processes.registry)
    tickets = Tickets()
    register_terminals(
        methods,
        terminals,
        environment,
        workspace=config.processes.workspace,
        max_buffer_bytes=config.processes.max_buffer_bytes,
        tickets=tickets,
    )
    uploads = register_files(
        methods, workspace=config.processes.workspace, instance=identity.instance
    )
    identity.counters["uploads_open"] = lambda: len(uploads)
    identity.capabilities = methods.namespaces
    policy = ServerPolicy(
        instance=identity.instance,
        server=SERVER_NAME,
        capabilities=identity.capabilities,
        max_frame=config.max_frame,
        token=config.token,
    )
    server = Server(policy, methods, ServerSettings(handshake_timeout=config.handshake_timeout))
    websocket = WebSocketSettings(
        max_message=config.max_frame,
        ping_interval=config.ws_ping_interval,
        idle_timeout=config.ws_idle_timeout,
    )
    front = HttpFront(server, identity, terminals, tickets, websocket)

    listeners = Listeners()
    try:
        listeners.open(config.listeners())
    except ListenError as exc:
        raise ConfigError(str(exc)) from None
    identity.listeners = list(listeners.bound)
    lifecycle = Lifecycle()
    main: Process | None = None
    stopped: set[str] = set()
    exit_code: int | None = None

    def forward(signum: int) -> bool:
        if main is None or main.group_settled.is_set():
            return False
        main.signal_tree(signum)
        if pid1.SIGNAL_POLICY.get(signal.Signals(signum)) is pid1.Action.STOP:
            stopped.add(main.id)  # its stop signal: shutdown must not send SIGTERM on top
        return True

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(pid1.serve_signals, lifecycle, forward)
            await nursery.start(reaper.serve)
            await nursery.start(hub.serve)
            await nursery.start(processes.serve)
            await nursery.start(terminals.serve)
            await nursery.start(watch.serve)
            await nursery.start(server.serve_listeners, listeners.trio_listeners)
            await nursery.start(front.serve, listeners.http_listeners)
            front.ready = True
            for address in listeners.bound:
                log.info("listening on %s", address)
            tee_done = trio.Event()
            if config.main_command:
                try:
                    main = _start_main(processes, environment, config.main_command)
                except MainCommandFailed as exc:
                    exit_code = exc.exit_code
                    lifecycle.request_stop("the main command could not start")
            if main is not None:

                async def tee_then_stop(process: Process) -> None:
                    await _tee(process)
                    tee_done.set()
                    assert process.exit is not None
                    lifecycle.request_stop(f"the main command exited ({process.exit.code})")

                nursery.start_soon(tee_then_stop, main)
            log.info("ready: instance %s, pid %d", identity.instance, os.getpid())
            task_status.started(identity)

            await lifecycle.stop_requested.wait()
            server.shutdown()
            async with trio.open_nursery() as stopping:
                stopping.start_soon(
                    functools.partial(
                        processes.terminate_all,
                        config.stop_grace,
                        lifecycle.hurry,
                        already_termed=frozenset(stopped),
                    )
                )
                stopping.start_soon(terminals.terminate_all, config.stop_grace, lifecycle.hurry)
            if main is not None:
                with trio.move_on_after(TEE_FLUSH_TIMEOUT):
                    await tee_done.wait()
            nursery.cancel_scope.cancel()
    finally:
        reaper.reap_now()
        listeners.remove_socket_files()
    if exit_code is None:
        exit_code = 0 if main is None or main.exit is None else main.exit.code
    log.info("stopped (exit code %d)", exit_code)
    return exit_code
