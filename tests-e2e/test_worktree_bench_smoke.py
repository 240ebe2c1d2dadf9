"""Smoke: the worktree benchmark's lifecycle part runs end to end (``--quick --no-products``).

It runs the script as a program (never imported) and checks the JSON it writes: every figure of
the three lifecycle cases is present and positive, the checkout's disk use is measured, no case
reported a problem, and the leftover check passed (no worktree registered or on disk, no process
left). Timings are never asserted (the machine is shared). The real delegations, which start the
products, are left out: the e2e tests in test_worktree_real.py drive them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

CASES = ("head_unchanged", "head_one_edit", "working_tree_one_change")
FIGURES = ("make_ms", "finish_ms", "total_ms", "host_cpu_ms", "children_cpu_ms", "cpu_ms")


@pytest.mark.timeout(120)
async def test_quick_worktree_benchmark_writes_a_complete_report(
    tmp_path: Path, benchmark_report: Any
) -> None:
    report = await benchmark_report(
        "worktree.py", "--quick", "--no-products", out=tmp_path / "worktree.json", timeout_s=100
    )
    assert "delegations" not in report
    repository = report["repository"]
    assert repository["files"] == 302  # 300 generated, a README and a .gitignore
    assert repository["bytes"] > 300 * 1024
    life = report["lifecycle"]
    assert life["rounds"] == 2
    for case in CASES:
        figures = life[case]
        for figure in FIGURES:
            assert figures[figure] > 0, (case, figure)
        assert len(figures["runs_total_ms"]) == life["rounds"]
        assert figures["problems"] == []
        assert figures["disk"]["files"] >= repository["files"]
        assert figures["disk"]["allocated_bytes"] > 0
        assert figures["admin_disk"]["allocated_bytes"] > 0
    left = report["leftovers"]
    assert left["ok"]
    assert left["worktrees_root_under_temp"]
    assert left["extra_registered"] == left["admin_dirs_left"] == []
    assert left["worktree_dirs_left"] == left["processes_left"] == []
    assert report["meta"]["loadavg_after"]
