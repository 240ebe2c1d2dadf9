"""Smoke: the benchmark script runs end to end (quick settings, Codex only).

It runs as a program (never imported) and checks the JSON it writes: every measured figure is
present and positive, the targets are evaluated, nothing leaked. The paired mode runs without the
peer SDKs and needs no ``bench`` group; the user method (``--method user``) compares with the
official Codex SDK, so it needs ``openai-codex`` (the ``bench`` group, one of the default groups).
Timing targets are printed by the script, never asserted here (the machine is shared).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.mark.real_product
@pytest.mark.timeout(120)
async def test_quick_benchmark_writes_a_complete_report(
    tmp_path: Path, benchmark_report: Any
) -> None:
    args = ("--quick", "--products", "codex", "--no-peers")
    report = await benchmark_report("run.py", *args, "--no-table", out=tmp_path / "bench.json")
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


@pytest.mark.real_product
@pytest.mark.timeout(120)
async def test_user_method_writes_a_complete_report(tmp_path: Path, benchmark_report: Any) -> None:
    args = ("--method", "user", "--rounds", "1", "--warmup", "0", "--products", "codex")
    report = await benchmark_report("run.py", *args, "--no-table", out=tmp_path / "user.json")
    meta = report["meta"]
    assert meta["method"] == "user"
    assert (meta["rounds"], meta["warmup"], meta["nice"]) == (1, 0, "default")
    assert meta["leftover_marked_processes"] == []
    assert meta["leftover_children"] == []
    assert len(meta["load_before"]) == 3
    assert list(report["products"]) == ["codex"]
    codex = report["products"]["codex"]
    assert codex["errors"] == []
    assert codex["late_tree_exits"] == []
    assert codex["n"] == 1
    for key in ("dsh_e2e_ms", "sdk_e2e_ms", "dsh_cpu_ms", "sdk_cpu_ms"):
        assert codex[key] > 0, key
    for metric in ("e2e", "cpu"):
        ratio = codex[f"{metric}_ratio_of_medians"]
        assert ratio > 0
        assert codex[f"{metric}_ratio_median_of_rounds"] == pytest.approx(ratio, rel=0.01)
    for side in ("dsh", "sdk"):
        assert codex["samples_ms"][side] == [[codex[f"{side}_e2e_ms"], codex[f"{side}_cpu_ms"]]]


@pytest.mark.real_product
@pytest.mark.timeout(120)
async def test_user_method_measures_claude_code_against_both_sdk_sides(
    tmp_path: Path, benchmark_report: Any
) -> None:
    args = ("--method", "user", "--rounds", "1", "--warmup", "0", "--products", "claude-code")
    report = await benchmark_report("run.py", *args, "--no-table", out=tmp_path / "user.json")
    claude = report["products"]["claude-code"]
    assert (claude["errors"], claude["late_tree_exits"], claude["n"]) == ([], [], 1)
    assert report["meta"]["leftover_marked_processes"] == []
    for side in ("dsh", "sdk", "sdk_stream"):
        sample = [claude[f"{side}_e2e_ms"], claude[f"{side}_cpu_ms"]]
        assert all(value > 0 for value in sample), side
        assert claude["samples_ms"][side] == [sample]
    for metric in ("e2e", "cpu"):
        dsh = claude[f"dsh_{metric}_ms"]
        for suffix, side in (("", "sdk"), ("_to_sdk_stream", "sdk_stream")):
            expected = dsh / claude[f"{side}_{metric}_ms"]
            assert claude[f"{metric}_ratio{suffix}_of_medians"] == pytest.approx(expected, rel=0.02)


@pytest.mark.timeout(60)
async def test_the_caps_and_queue_benchmark_prints_every_variant() -> None:
    import sys

    from dsh.subprocess.testing import run_to_exit

    script = Path(__file__).parent / "benchmarks" / "fair_queue.py"
    ran = await run_to_exit(
        [sys.executable, str(script), "--runs", "40", "--rounds", "1"], timeout_s=50
    )
    assert ran.exit_code == 0, ran.stderr[-2000:]
    printed = [line.split()[0] for line in ran.stdout.splitlines()[1:]]
    assert printed == ["none", "caps", "free", "full"]
