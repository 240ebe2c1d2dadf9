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
