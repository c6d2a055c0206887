"""The protocol package is sans-IO: no trio, no sockets, no os."""

import ast
import subprocess
import sys
from pathlib import Path

PROTOCOL = Path(__file__).parents[2] / "protocol"


def test_protocol_sources_import_no_io_modules() -> None:
    forbidden = {"trio", "socket", "os", "supervisor", "asyncio", "subprocess"}
    for path in PROTOCOL.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in forbidden, f"{path.name} imports {name}"


def test_importing_protocol_loads_no_trio_or_socket() -> None:
    code = "import sys, protocol; print('trio' in sys.modules, 'socket' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
