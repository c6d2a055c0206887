"""The `supervisor` command line: `serve` runs the daemon; the rest talk to a running one."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from protocol import SupervisorError

from . import SERVER_NAME
from .addresses import Address, default_address, parse_address
from .client import Client, open_client
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
        help="unix:/path or tcp:HOST:PORT; repeatable (default: the Unix socket)",
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
    return parser


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


_CLIENT_ACTIONS: dict[str, Callable[[argparse.Namespace, Client], Awaitable[int]]] = {
    "ping": _ping,
    "info": _info,
}


def _run_serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = DaemonConfig(
            listen=args.listen,
            token=read_token(args.token_file),
            handshake_timeout=args.handshake_timeout,
            processes=ProcessSettings(workspace=os.path.abspath(args.workspace)),
            stop_grace=args.stop_grace,
            **({"max_frame": args.max_frame} if args.max_frame else {}),
        )
        trio.run(serve, config)
    except ConfigError as exc:
        print(f"{PROG} serve: {exc}", file=sys.stderr)
        return 2
    return 0


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
