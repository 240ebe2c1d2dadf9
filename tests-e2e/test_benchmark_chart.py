"""The benchmark's SVG writer: fixed numbers in, a well-formed chart holding every bar and label."""

from __future__ import annotations

import importlib.util
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

_PATH = Path(__file__).parent / "benchmarks" / "chart.py"
_SPEC = importlib.util.spec_from_file_location("bench_chart", _PATH)
assert _SPEC is not None
assert _SPEC.loader is not None
chart = importlib.util.module_from_spec(_SPEC)
sys.modules["bench_chart"] = chart
_SPEC.loader.exec_module(chart)

_NS = "{http://www.w3.org/2000/svg}"


def test_chart_holds_two_bars_and_a_label_per_pair() -> None:
    pairs = [
        chart.Pair("codex", "cold", 200.0, 250.0),
        chart.Pair("claude-code", "warm", 100.0, 400.0),
    ]
    root = ET.fromstring(chart.render(pairs))
    bars = [r for r in root.iter(f"{_NS}rect") if r.get("class") == "bar"]
    assert [b.get("data-who") for b in bars] == ["dsh", "SDK", "dsh", "SDK"]
    heights = [float(b.get("height", "0")) for b in bars]
    assert heights[3] == max(heights)
    assert heights[2] == heights[3] / 4
    texts = [t.text for t in root.iter(f"{_NS}text")]
    assert "codex cold" in texts
    assert "claude-code warm" in texts
    assert "0.80x SDK" in texts
    assert "0.25x SDK" in texts


def test_chart_refuses_no_figures() -> None:
    with pytest.raises(ValueError, match="pairs"):
        chart.render([])


def test_pairs_come_from_a_main_run_cold_and_a_prewarm_run_warm() -> None:
    def e2e(median_s: float) -> dict[str, dict[str, float]]:
        return {"total_s": {"median": median_s}}

    main_run = {
        "products": {
            "codex": {"e2e": {"dsh": e2e(0.2211), "sdk": e2e(0.25), "cli": e2e(0.3)}},
            "claude-code": {"e2e": {"dsh": e2e(0.7), "cli": e2e(0.8)}},  # --no-peers: no SDK
        }
    }
    assert chart.pairs_of(main_run) == [chart.Pair("codex", "cold", 221.1, 250.0)]
    prewarm_run = {
        "products": {
            "codex": {"dsh_warm_e2e_ms": 80.5, "sdk_e2e_ms": 208.4},
            "claude-code": {"error": "RuntimeError()"},
        }
    }
    assert chart.pairs_of(prewarm_run) == [chart.Pair("codex", "warm", 80.5, 208.4)]
    assert chart.pairs_of({"products": {}}) == []
