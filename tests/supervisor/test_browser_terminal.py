"""The example browser terminal (examples/browser-terminal) in real headless Chromium.

Needs Debian's `chromium`, node, and the example's npm packages (`npm ci` in the example
folder); `.ci/run` installs all three, so CI runs it. Elsewhere it skips and says why.
"""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio

from supervisor.client import open_client

from .conftest import Daemon
from .webpeer import host_port

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "browser-terminal"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
TOKEN = "browser-test-token"


def _missing() -> str | None:
    if CHROMIUM is None:
        return "Chromium is not installed (apt-get install chromium)"
    if shutil.which("node") is None:
        return "node is not installed"
    if not (EXAMPLE / "node_modules" / "playwright-core").is_dir():
        return f"the example's npm packages are missing (npm ci --prefix {EXAMPLE})"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def page_server() -> Iterator[str]:
    """The example folder over HTTP, as a person would serve it."""
    handler = functools.partial(_QuietHandler, directory=str(EXAMPLE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_type_resize_and_reload_in_chromium(
    spawn_daemon: Callable[..., Daemon], page_server: str
) -> None:
    d = spawn_daemon(env={"SUPERVISOR_TOKEN": TOKEN})
    async with open_client(d.unix, token=TOKEN) as c:
        t = await c.terminal.create(["sh"])
        ticket = (await c.call("terminal.ticket", {"id": t["id"]}))["ticket"]
        host, port = host_port(d.http)
        page = f"{page_server}/?daemon=ws://{host}:{port}&terminal={t['id']}&ticket={ticket}"
        assert CHROMIUM is not None
        with trio.fail_after(120):
            done = await trio.run_process(
                ["node", "test/drive.mjs", page, CHROMIUM],
                cwd=EXAMPLE,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        assert done.returncode == 0, done.stderr.decode()
        seen = json.loads(done.stdout.decode().strip().splitlines()[-1])
        assert "error" not in seen, seen
        assert seen["echoed"] and seen["replayed"]
        rows, cols = seen["size"]
        assert seen["stty"] == f"{rows} {cols}"
        snapshot = await c.terminal.get(t["id"])
        assert (snapshot["rows"], snapshot["cols"]) == (rows, cols)  # the browser's size won
        assert snapshot["status"] == "running"  # a reload is a disconnect: the shell runs on
        await c.terminal.terminate(t["id"])
