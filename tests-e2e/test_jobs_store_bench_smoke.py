"""Smoke: the job store benchmark's store part runs end to end (``--quick --no-soak``).

It runs the script as a program (never imported) and checks the JSON it writes: every figure is
present and positive, the read targets are evaluated, no job failed. Timing targets are printed
by the script, never asserted here (the machine is shared). The ``dsh mcp`` soak, which drives
the real products, is left out: it takes minutes.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh.subprocess import Collect, SpawnSpec, default_runtime

SCRIPT = Path(__file__).resolve().parent / "benchmarks" / "jobs_store.py"


async def _run_script(out: Path) -> dict[str, Any]:
    spec = SpawnSpec(
        argv=[sys.executable, str(SCRIPT), "--quick", "--no-soak", "--json", str(out)],
        stdout=Collect(1 << 16),
        stderr=Collect(1 << 16),
    )
    proc = await default_runtime().spawn(spec)
    try:
        outcome = await proc.wait()
    finally:
        await proc.aclose()
    assert outcome.exit_code == 0, proc.collected("stderr").text[-2000:]
    text = await asyncio.to_thread(out.read_text, encoding="utf-8")
    report: dict[str, Any] = json.loads(text)
    return report


@pytest.mark.timeout(120)
async def test_quick_store_benchmark_writes_a_complete_report(tmp_path: Path) -> None:
    report = await _run_script(tmp_path / "jobs-store.json")
    assert "soak" not in report
    for part in ("store_cost", "store_cost_no_prune"):
        cost = report[part]
        assert cost["jobs"] == 200
        for side in ("memory", "sqlite"):
            assert cost[side]["cpu_us_per_job"] > 0
            assert cost[side]["wall_us_per_job"] > 0
            assert len(cost[side]["cpu_us_runs"]) == cost["rounds"]
            assert cost[side]["failed"] == 0
        assert cost["cpu_ratio_sqlite_vs_memory"] > 0
        assert isinstance(cost["cpu_extra_us_per_job"], float)  # a difference: either sign
    reads = report["reads"]
    assert reads["records"] == 10_000
    for figure in ("job_list", "first_page"):
        assert reads[figure]["median_ms"] > 0
        assert reads[f"{figure}_status"] in {"PASS", "MISS"}
    assert reads["job_list_text_chars"] > 0
    assert (reads["pruned"], reads["kept"]) == (9000, 1000)
    assert reads["bytes_at_10000"] > 0
    assert 0 < reads["bytes_after_prune_and_vacuum"] < reads["bytes_at_10000"]
    assert reads["wal_bytes_after_prune_and_vacuum"] == 0  # vacuum() truncates the log
    assert report["meta"]["loadavg_after"]
