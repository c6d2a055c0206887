"""The `supervisor` command line: `serve` runs the daemon; the rest talk to a running one."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from protocol import SupervisorError

from . import SERVER_NAME
from ._attach import DETACH_NAME, attach, default_shell, local_size
from ._file_cli import ACTIONS as FILE_ACTIONS
from ._file_cli import add_commands as add_file_commands
from .addresses import Address, default_address, parse_address
from .client import Client, EventStream, open_client
from .daemon import TOKEN_ENV, ConfigError, DaemonConfig, read_token, serve
from .processes import ProcessSettings

PROG = "supervisor"


def _address(text: str) -> Address:
    try:
        return parse_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__)
    parser.add_argument("--version", action="version", version=SERVER_NAME)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve_cmd = commands.add_parser("serve", help="run the daemon")
    serve_cmd.add_argument(
        "--listen",
        action="append",
        type=_address,
        default=[],
        metavar="ADDRESS",
        help="unix:/path or tcp:HOST:PORT; repeatable (default: $SUPERVISOR_LISTEN, "
        "space-separated, else the Unix socket)",
    )
    serve_cmd.add_argument(
        "--token-file", metavar="PATH", help=f"token clients must present (or {TOKEN_ENV})"
    )
    serve_cmd.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    serve_cmd.add_argument("--max-frame", type=int, default=None, metavar="BYTES")
    serve_cmd.add_argument("--handshake-timeout", type=float, default=10.0, metavar="SECONDS")
    serve_cmd.add_argument(
        "--workspace",
        default="/workspace",
        metavar="DIR",
        help="default working directory of processes; created when missing",
    )
    serve_cmd.add_argument(
        "--stop-grace",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="on shutdown, time between SIGTERM and SIGKILL for supervised processes",
    )
    serve_cmd.add_argument(
        "--ws-ping-interval",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="the HTTP front pings a WebSocket peer quiet for this long",
    )
    serve_cmd.add_argument(
        "--ws-idle-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="and closes one quiet for this long",
    )
    serve_cmd.add_argument(
        "main_command",
        nargs=argparse.REMAINDER,
        metavar="-- CMD ARGS...",
        help="a main command: supervised; when it exits, the daemon exits with its code",
    )

    def client_command(name: str, help: str) -> argparse.ArgumentParser:
        cmd = commands.add_parser(name, help=help)
        cmd.add_argument(
            "--connect",
            type=_address,
            default=None,
            metavar="ADDRESS",
            help="daemon address (default: $SUPERVISOR_ADDRESS, else the default socket)",
        )
        cmd.add_argument(
            "--token-file", metavar="PATH", help=f"token to present (default: ${TOKEN_ENV})"
        )
        cmd.add_argument("--json", action="store_true", help="machine-readable output")
        return cmd

    client_command("ping", "check that the daemon answers")
    client_command("info", "show the daemon's identity and listeners")

    exec_cmd = client_command("exec", "run a program; stream its output; exit with its code")
    exec_cmd.add_argument("--cwd", metavar="DIR", help="working directory (default: workspace)")
    exec_cmd.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="repeatable"
    )
    exec_cmd.add_argument("--timeout", type=float, metavar="SECONDS", help="remote lifetime")
    exec_cmd.add_argument("--detach", action="store_true", help="print the id and return")
    exec_cmd.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- ARGV...")

    client_command("ps", "list processes")
    logs_cmd = client_command("logs", "print a process's output")
    logs_cmd.add_argument("id")
    logs_cmd.add_argument("-f", "--follow", action="store_true")
    logs_cmd.add_argument("--since", metavar="CURSOR", help="resume after this cursor")
    kill_cmd = client_command("kill", "signal a process's group")
    kill_cmd.add_argument("id")
    kill_cmd.add_argument("-s", "--signal", default="TERM", help="name (TERM) or number (15)")
    wait_cmd = client_command("wait", "wait for a process; exit with its code")
    wait_cmd.add_argument("id")

    term_cmd = client_command("term", f"open a terminal and attach to it ({DETACH_NAME} detaches)")
    term_cmd.add_argument("--cwd", metavar="DIR", help="working directory (default: workspace)")
    term_cmd.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="repeatable"
    )
    term_cmd.add_argument("--detach", action="store_true", help="print the id; do not attach")
    term_cmd.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- ARGV...")
    ticket_cmd = client_command(
        "ticket", "a short-lived ticket for a browser to attach to a terminal (/terminals/ID)"
    )
    ticket_cmd.add_argument("id")
    ticket_cmd.add_argument("--ttl", type=float, default=60.0, metavar="SECONDS")
    attach_cmd = client_command("attach", f"reattach to a terminal ({DETACH_NAME} detaches)")
    attach_cmd.add_argument("id")
    attach_cmd.add_argument("--since", metavar="CURSOR", help="replay only what came after")
    client_command("terms", "list terminals")

    wait_port_cmd = client_command("wait-port", "wait until a port is ready (exit 0), or fail")
    wait_port_cmd.add_argument("port", type=int)
    wait_port_cmd.add_argument("--http", metavar="PATH", help="HTTP GET this path (default: TCP)")
    wait_port_cmd.add_argument("--status", default="200-399", help="status or range (HTTP)")
    wait_port_cmd.add_argument("--timeout", type=float, metavar="SECONDS")
    wait_port_cmd.add_argument("--interval", type=int, default=500, metavar="MS")
    wait_port_cmd.add_argument("--process", metavar="ID", help="fail if this process exits first")
    client_command("ports", "list listening TCP ports")
    add_file_commands(client_command)
    return parser


def signal_number(text: str) -> int:
    """`TERM`, `SIGTERM`, `term` or `15` -> 15."""
    if text.isdigit():
        return int(text)
    name = text.upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    try:
        return int(signal.Signals[name])
    except KeyError:
        raise SupervisorError("VALIDATION_FAILED", f"unknown signal {text!r}") from None


def _client_token(args: argparse.Namespace) -> str | None:
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as f:
            return f.read().strip()
    return os.environ.get(TOKEN_ENV) or None


async def _with_client(args: argparse.Namespace, action: Callable[[Client], Awaitable[int]]) -> int:
    address = args.connect or default_address()
    async with open_client(address, token=_client_token(args)) as client:
        return await action(client)


async def _ping(args: argparse.Namespace, client: Client) -> int:
    started = time.perf_counter()
    result = await client.call("runtime.ping")
    elapsed_ms = (time.perf_counter() - started) * 1000
    if args.json:
        print(json.dumps({"instance": result["instance"], "rtt_ms": round(elapsed_ms, 3)}))
    else:
        print(f"pong from {client.welcome.server} ({result['instance']}) in {elapsed_ms:.2f} ms")
    return 0


async def _info(args: argparse.Namespace, client: Client) -> int:
    info: dict[str, Any] = await client.call("runtime.info")
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    for key, value in info.items():
        shown = ", ".join(map(str, value)) if isinstance(value, list) else value
        print(f"{key + ':':<19}{shown}")
    return 0


def _exit_code(exit: dict[str, Any] | None) -> int:
    return 1 if exit is None else int(exit["code"])


async def _write_events(events: EventStream) -> dict[str, Any] | None:
    """Copy log events to our stdout/stderr byte for byte; return the exit, if it came."""
    outputs = {"stdout": sys.stdout.buffer, "stderr": sys.stderr.buffer}
    async for event in events:
        kind = event["type"]
        if kind in outputs:
            outputs[kind].write(event["data"])
            outputs[kind].flush()
        elif kind == "truncated":
            print(f"[{event['dropped_bytes']} bytes of output were lost]", file=sys.stderr)
        elif kind == "terminal":
            if event["state"] == "exited":
                return dict(event["exit"])
            print(f"process failed: {event['error']['message']}", file=sys.stderr)
            return None
    return None


def _argv(args: argparse.Namespace) -> list[str]:
    return list(args.argv[1:] if args.argv[:1] == ["--"] else args.argv)


def _env(args: argparse.Namespace) -> dict[str, str | None]:
    env: dict[str, str | None] = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep:
            raise SupervisorError("VALIDATION_FAILED", f"--env {item!r} must be NAME=VALUE")
        env[name] = value
    return env


async def _exec(args: argparse.Namespace, client: Client) -> int:
    argv = _argv(args)
    if not argv:
        raise SupervisorError("VALIDATION_FAILED", "nothing to run: supervisor exec -- ARGV...")
    env = _env(args)
    timeout_ms = None if args.timeout is None else max(1, int(args.timeout * 1000))
    process = await client.process.exec(argv, cwd=args.cwd, env=env, timeout_ms=timeout_ms)
    if args.detach:
        print(process["id"])
        return 0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_forward_interrupts, client, process["id"])
        async with client.process.logs(process["id"], follow=True) as events:
            exit = await _write_events(events)
        nursery.cancel_scope.cancel()
    return _exit_code(exit)


async def _forward_interrupts(client: Client, process_id: str) -> None:
    """Ctrl-C here is SIGINT to the remote process group, as in a local terminal."""
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async for _ in signals:
            await client.process.kill(process_id, signal.SIGINT)


async def _ps(args: argparse.Namespace, client: Client) -> int:
    processes = await client.process.list()
    if args.json:
        print(json.dumps(processes, indent=2))
        return 0
    print(f"{'ID':<28} {'PID':>7} {'STATE':<8} {'EXIT':>5} {'STARTED':<20} COMMAND")
    for p in processes:
        exit = p.get("exit")
        code = "" if exit is None else str(exit["code"])
        command = " ".join(shlex.quote(arg) for arg in p["command"])
        started = p["started_at"][:19].replace("T", " ")
        print(f"{p['id']:<28} {p['pid']:>7} {p['state']:<8} {code:>5} {started:<20} {command}")
    return 0


async def _logs(args: argparse.Namespace, client: Client) -> int:
    async with client.process.logs(args.id, since=args.since, follow=args.follow) as events:
        await _write_events(events)
    return 0


async def _kill(args: argparse.Namespace, client: Client) -> int:
    result = await client.process.kill(args.id, signal_number(args.signal))
    if args.json:
        print(json.dumps(result))
    return 0


async def _wait(args: argparse.Namespace, client: Client) -> int:
    exit = await client.process.wait_exit(args.id)
    if args.json:
        print(json.dumps(exit))
    return _exit_code(exit)


async def _term(args: argparse.Namespace, client: Client) -> int:
    cols, rows = local_size()
    argv = _argv(args) or [default_shell()]
    terminal = await client.terminal.create(
        argv, cwd=args.cwd, env=_env(args), cols=cols, rows=rows
    )
    if args.detach:
        print(terminal["id"])
        return 0
    return await attach(client, terminal["id"])


async def _ticket(args: argparse.Namespace, client: Client) -> int:
    ttl_ms = max(1, int(args.ttl * 1000))
    issued = await client.call("terminal.ticket", {"id": args.id, "ttl_ms": ttl_ms})
    print(json.dumps(issued) if args.json else issued["ticket"])
    return 0


async def _attach(args: argparse.Namespace, client: Client) -> int:
    if await client.terminal.get(args.id) is None:
        raise SupervisorError("TERMINAL_NOT_FOUND", f"no terminal {args.id} in this daemon")
    return await attach(client, args.id, since=args.since)


async def _terms(args: argparse.Namespace, client: Client) -> int:
    terminals = await client.terminal.list()
    if args.json:
        print(json.dumps(terminals, indent=2))
        return 0
    print(f"{'ID':<28} {'PID':>7} {'STATUS':<8} {'EXIT':>5} {'SIZE':>9}  COMMAND")
    for t in terminals:
        exit = t.get("exit")
        code = "" if exit is None else str(exit["code"])
        size = f"{t['cols']}x{t['rows']}"
        command = " ".join(shlex.quote(arg) for arg in t["command"])
        print(f"{t['id']:<28} {t['pid']:>7} {t['status']:<8} {code:>5} {size:>9}  {command}")
    return 0


def _status(text: str) -> int | dict[str, int]:
    low, sep, high = text.partition("-")
    if not low.isdigit() or (sep and not high.isdigit()):
        raise SupervisorError("VALIDATION_FAILED", f"--status {text!r}: use 200 or 200-399")
    return {"min": int(low), "max": int(high)} if sep else int(low)


async def _wait_port(args: argparse.Namespace, client: Client) -> int:
    params: dict[str, Any] = {"port": args.port, "interval_ms": args.interval}
    if args.http:
        params.update(mode="http", path=args.http, status=_status(args.status))
    if args.timeout is not None:
        params["timeout_ms"] = max(0, int(args.timeout * 1000))
    if args.process:
        result = await client.call("process.wait_port", {**params, "id": args.process})
    else:
        result = await client.call("port.wait", params)
    if args.json:
        print(json.dumps(result))
    else:
        extra = f", status {result['status']}" if "status" in result else ""
        elapsed = result["elapsed_ms"]
        print(f"port {result['port']} ready ({result['mode']}{extra}) after {elapsed:.1f} ms")
    return 0


async def _ports(args: argparse.Namespace, client: Client) -> int:
    ports = await client.call("port.list")
    if args.json:
        print(json.dumps(ports, indent=2))
        return 0
    print(f"{'PORT':>5} {'ADDRESS':<40} {'FAMILY':<6} OWNER")
    for p in ports:
        owner = p["owner"]
        shown = "" if owner is None else f"{owner['id']} (pid {owner['pid']})"
        print(f"{p['port']:>5} {p['address']:<40} {p['family']:<6} {shown}")
    return 0


_CLIENT_ACTIONS: dict[str, Callable[[argparse.Namespace, Client], Awaitable[int]]] = {
    "ping": _ping,
    "info": _info,
    "exec": _exec,
    "ps": _ps,
    "logs": _logs,
    "kill": _kill,
    "wait": _wait,
    "term": _term,
    "attach": _attach,
    "terms": _terms,
    "ticket": _ticket,
    "wait-port": _wait_port,
    "ports": _ports,
    **FILE_ACTIONS,
}


def _run_serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    main_command = list(args.main_command)
    if main_command[:1] == ["--"]:
        main_command = main_command[1:]
    try:
        listen = args.listen or [
            _address(text) for text in os.environ.get("SUPERVISOR_LISTEN", "").split()
        ]
        config = DaemonConfig(
            listen=listen,
            token=read_token(args.token_file),
            handshake_timeout=args.handshake_timeout,
            processes=ProcessSettings(workspace=os.path.abspath(args.workspace)),
            stop_grace=args.stop_grace,
            main_command=main_command,
            ws_ping_interval=args.ws_ping_interval,
            ws_idle_timeout=args.ws_idle_timeout,
            **({"max_frame": args.max_frame} if args.max_frame else {}),
        )
        exit_code = trio.run(serve, config)
    except (ConfigError, argparse.ArgumentTypeError) as exc:
        print(f"{PROG} serve: {exc}", file=sys.stderr)
        return 2
    # Shutdown is complete: a late signal must not turn the exit code into a kill.
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    return exit_code


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    if args.command == "serve":
        return _run_serve(args)
    action = _CLIENT_ACTIONS[args.command]
    try:
        return trio.run(_with_client, args, lambda client: action(args, client))
    except SupervisorError as exc:
        print(f"{PROG} {args.command}: {exc.message} [{exc.code}]", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{PROG} {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
