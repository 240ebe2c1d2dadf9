"""Smoke: the job store benchmark's store part runs end to end (``--quick --no-soak``).

It runs the script as a program (never imported) and checks the JSON it writes: every figure is
present and positive, the read targets are evaluated, no job failed. Timing targets are printed
by the script, never asserted here (the machine is shared). The ``dsh mcp`` soak, which drives
the real products, is left out: it takes minutes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.mark.timeout(120)
async def test_quick_store_benchmark_writes_a_complete_report(
    tmp_path: Path, benchmark_report: Any
) -> None:
    report = await benchmark_report(
        "jobs_store.py", "--quick", "--no-soak", out=tmp_path / "jobs-store.json"
    )
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
