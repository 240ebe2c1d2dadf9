"""Smoke: the start-up benchmark runs end to end (``--runs 1``) and writes a complete report.

It runs the script as a program (never imported) and checks every figure is present and
positive. Timings are never asserted (the machine is shared).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from dsh.subprocess.testing import run_to_exit

SCRIPT = Path(__file__).resolve().parent / "benchmarks" / "startup.py"
FIGURES = (
    "version_ms",
    "run_own_ms",
    "run_wall_ms",
    "run_floor_ms",
    "mcp_initialize_ms",
    "mcp_tools_ms",
)


@pytest.mark.timeout(180)
async def test_startup_benchmark_writes_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "startup.json"
    argv = [sys.executable, str(SCRIPT), "--runs", "1", "--json", str(out)]
    ran = await run_to_exit(argv, timeout_s=170)
    assert ran.exit_code == 0, ran.stderr[-2000:]
    report = json.loads(await asyncio.to_thread(out.read_text, encoding="utf-8"))
    for figure in FIGURES:
        assert report["medians_ms"][figure] > 0, figure
        assert len(report["samples_ms"][figure]) == 1, figure
    assert len(report["samples_ms"]["run_dsh_share_ms"]) == 1
    assert set(report["met"]) == set(report["targets_ms"])
