"""Smoke: the output-schema benchmark runs end to end (``--quick``: Codex, 2 runs per side).

It runs the script as a program (never imported) and checks the JSON it writes: every figure of
both sides is present and positive, the ratios and added figures are there, and dsh's own check
was measured. Timings are never asserted (the machine is shared).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dsh.subprocess.testing import run_to_exit

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(120)]

SCRIPT = Path(__file__).resolve().parent / "benchmarks" / "output_schema.py"
FIGURES = ("wall_ms", "cpu_ms", "request_bytes")


async def test_the_quick_benchmark_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    ran = await run_to_exit(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)], timeout_s=100
    )
    assert ran.exit_code == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    data = json.loads(out.read_text(encoding="utf-8"))
    assert set(data["check"]) == {"schema_check_us", "value_check_us"}
    assert all(value > 0 for value in data["check"].values())
    (product,) = data["delegations"]
    figures = data["delegations"][product]
    assert product == "codex"
    assert figures["runs"] == 2
    for side in ("none", "schema"):
        assert all(figures[side][name] > 0 for name in FIGURES)
    assert set(figures["ratio"]) == set(figures["added"]) == set(FIGURES)
    # The schema travels in the request: the typed side sends more bytes.
    assert figures["schema"]["request_bytes"] > figures["none"]["request_bytes"]
