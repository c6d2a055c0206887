"""The benchmark suite in smoke mode (tiny sizes): it must keep running, and report every
figure. The figures themselves are not judged here: speed targets live in bench/."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parents[2] / "bench" / "run.py"


def test_bench_smoke_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "smoke.json"
    run = subprocess.run(
        [sys.executable, str(BENCH), "--smoke", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    figures = json.loads(out.read_text())
    names = {f["name"] for f in figures}
    for expected in ("exec true + wait_exit p50", "runtime.ping p50", "port readiness p50",
                     "terminal echo p50", "delivery, flow block", "idle: CPU"):  # fmt: skip
        assert expected in names
    for f in figures:
        assert math.isfinite(f["value"]) and f["value"] >= 0, f
    delivery = next(f for f in figures if f["name"] == "delivery, flow block")
    assert delivery["extra"]["lost"] is False  # block flow is lossless even here
    assert "exec true + wait_exit p50" in run.stdout  # the table is printed
