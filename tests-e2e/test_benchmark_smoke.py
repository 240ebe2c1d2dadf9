"""Smoke: the benchmark script runs end to end (quick settings, Codex only, no peer SDKs).

It runs as a program (never imported), needs no ``bench`` group, and checks the JSON it writes:
every measured figure is present and positive, the targets are evaluated, nothing leaked.
Timing targets are printed by the script, never asserted here (the machine is shared).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dsh.subprocess import Collect, SpawnSpec, default_runtime

SCRIPT = Path(__file__).resolve().parent / "benchmarks" / "run.py"


@pytest.mark.real_product
@pytest.mark.timeout(120)
async def test_quick_benchmark_writes_a_complete_report(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    argv = [sys.executable, str(SCRIPT), "--quick", "--products", "codex", "--no-peers"]
    spec = SpawnSpec(
        argv=[*argv, "--no-table", "--json", str(out)],
        stdout=Collect(1 << 16),
        stderr=Collect(1 << 16),
    )
    proc = await default_runtime().spawn(spec)
    try:
        outcome = await proc.wait()
    finally:
        await proc.aclose()
    assert outcome.exit_code == 0, proc.collected("stderr").text[-2000:]
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["meta"]["variants"] == ["dsh", "cli"]
    assert report["meta"]["leftover_marked_processes"] == []
    codex = report["products"]["codex"]
    assert codex["errors"] == []
    assert codex["late_tree_exits"] == []
    for variant in ("dsh", "cli"):
        for metric in ("answer_s", "total_s", "cpu_s"):
            assert codex["e2e"][variant][metric]["n"] == 1
            assert codex["e2e"][variant][metric]["median"] > 0
    assert "sdk" not in codex["e2e"]
    assert 0 < codex["teardown_s"]["median"] < 10
    for key in ("cancel_idle", "cancel_tool"):
        assert 0 < codex[key]["tree_exit_s"]["median"] < 10
    assert codex["concurrency"]["n"] == 2
    assert codex["concurrency"]["ratio"] > 0
    assert codex["loop_lag_s"]["n"] > 0
    assert codex["floor_loop_lag_s"]["n"] > 0
    ratio = codex["e2e"]["dsh"]["total_s"]["median"] / codex["e2e"]["cli"]["total_s"]["median"]
    assert codex["e2e_fastest_peer"] == "cli"
    assert codex["e2e_ratio_vs_fastest_peer"] == pytest.approx(ratio)
    assert codex["e2e_paired_ratio_vs_fastest_peer"] == pytest.approx(ratio)  # one trio
    assert report["meta"]["e2e_per_round"] == 1
    statuses = {t["target"]: t["status"] for t in codex["targets"]}
    assert len(statuses) == 5
    cpu = "parent CPU per run / the SDK's (medians)"
    assert statuses.pop(cpu) == "n/a"  # no SDK ran
    assert set(statuses.values()) <= {"PASS", "MISS"}
