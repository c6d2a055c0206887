"""`supervisor serve`: assemble the daemon, run it, stop it on SIGTERM or SIGINT."""

from __future__ import annotations

import logging
import os
import resource
import signal
from dataclasses import dataclass, field

import trio

from protocol import DEFAULT_MAX_FRAME, ServerPolicy

from . import SERVER_NAME
from .addresses import Address, TcpAddress, UnixAddress, default_socket_path
from .listeners import ListenError, Listeners
from .port_api import register as register_ports
from .ports import ListenerWatch
from .process_api import SandboxEnvironment
from .process_api import register as register_processes
from .processes import ProcessSettings, ProcessTable
from .reaper import Reaper, become_subreaper
from .rpc import Methods
from .runtime import Runtime
from .runtime import register as register_runtime
from .server import Server, ServerSettings
from .spawn import mark_inherited_descriptors_cloexec
from .terminal_api import register as register_terminals
from .terminals import TerminalSettings, TerminalTable

log = logging.getLogger(__name__)

TOKEN_ENV = "SUPERVISOR_TOKEN"


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


def _prepare_process(config: DaemonConfig) -> None:
    """Process-wide set-up before anything is spawned."""
    mark_inherited_descriptors_cloexec()
    # Each supervised process holds two pipes: 1,000 of them need more than 1,024 fds.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        os.makedirs(config.processes.workspace, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create workspace {config.processes.workspace}: {exc.strerror}"
        ) from None
    if os.getpid() != 1:
        if become_subreaper():
            log.info("not PID 1: became a child subreaper, so orphans are reaped here too")
        else:
            log.warning("could not become a child subreaper; orphans will not be reaped")


async def serve(
    config: DaemonConfig, *, task_status: trio.TaskStatus[Runtime] = trio.TASK_STATUS_IGNORED
) -> None:
    """Run the daemon until SIGTERM or SIGINT; then shut down cleanly and return.

    Shutdown: stop accepting, answer in-flight requests with SHUTTING_DOWN, SIGTERM every
    supervised process tree, SIGKILL what is left after `stop_grace`, reap, return.

    Cancellation: closes every connection at once and returns.
    """
    config.check()
    _prepare_process(config)
    identity = Runtime()
    reaper = Reaper()
    processes = ProcessTable(identity.instance, reaper, config.processes)
    terminals = TerminalTable(identity.instance, reaper, config.terminals)
    environment = SandboxEnvironment(dict(os.environ))
    methods = Methods()
    register_runtime(methods, identity)
    register_processes(methods, processes, environment)
    watch = ListenerWatch()
    identity.counters["port_queries"] = lambda: watch.queries
    register_ports(methods, watch, processes.registry)
    register_terminals(
        methods,
        terminals,
        environment,
        workspace=config.processes.workspace,
        max_buffer_bytes=config.processes.max_buffer_bytes,
    )
    identity.capabilities = methods.namespaces

    listeners = Listeners()
    try:
        listeners.open(config.listeners())
    except ListenError as exc:
        raise ConfigError(str(exc)) from None
    identity.listeners = list(listeners.bound)
    policy = ServerPolicy(
        instance=identity.instance,
        server=SERVER_NAME,
        capabilities=identity.capabilities,
        max_frame=config.max_frame,
        token=config.token,
    )
    server = Server(policy, methods, ServerSettings(handshake_timeout=config.handshake_timeout))
    try:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                await nursery.start(reaper.serve)
                await nursery.start(processes.serve)
                await nursery.start(terminals.serve)
                await nursery.start(watch.serve)
                await nursery.start(server.serve_listeners, listeners.trio_listeners)
                for address in listeners.bound:
                    log.info("listening on %s", address)
                log.info("ready: instance %s, pid %d", identity.instance, os.getpid())
                task_status.started(identity)
                async for signum in signals:
                    log.info("received %s: shutting down", signal.Signals(signum).name)
                    break
                server.shutdown()
                async with trio.open_nursery() as stopping:
                    stopping.start_soon(processes.terminate_all, config.stop_grace)
                    stopping.start_soon(terminals.terminate_all, config.stop_grace)
                nursery.cancel_scope.cancel()
    finally:
        listeners.remove_socket_files()
    log.info("stopped")
