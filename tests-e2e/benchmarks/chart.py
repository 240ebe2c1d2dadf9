"""A dependency-free SVG bar chart of dsh against the official SDKs, per product, cold and warm.

Plain string building, so the benchmark needs no plotting library. ``render`` takes the medians
(milliseconds, end to end) and returns an SVG document; ``pairs_of`` reads them from a run.py
JSON report (``run.py --svg PATH`` does both); ``python chart.py --recorded PATH`` writes the chart
of the figures recorded in docs/performance.md.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

BAR_WIDTH = 28
GROUP_GAP = 36
PLOT_HEIGHT = 220
TOP = 40
LEFT = 50
COLOURS = {"dsh": "#2b6cb0", "SDK": "#a0aec0"}


@dataclass(frozen=True)
class Pair:
    """One product in one mode: dsh's median and the official SDK's, in ms."""

    product: str
    mode: str
    dsh_ms: float
    sdk_ms: float


#: End-to-end medians recorded in docs/performance.md (cold: the paired method, `run.py --runs 3`;
#: warm: `run.py --prewarm 2 --runs 3`; both 2026-12-06), drawn until a run writes its own chart.
RECORDED = (
    Pair("codex", "cold", 156.0, 161.0),
    Pair("claude-code", "cold", 554.0, 527.0),
    Pair("codex", "warm", 57.5, 146.5),
    Pair("claude-code", "warm", 187.7, 471.2),
)


def pairs_of(report: dict[str, Any]) -> list[Pair]:
    """The end-to-end medians of a run.py report, in ms, one pair per product measured.

    A main run gives cold pairs (its ``e2e`` medians of dsh and the SDK, in seconds); a
    ``--prewarm`` run gives warm pairs. A product without both figures (``--no-peers``, an
    error) is left out.
    """
    pairs: list[Pair] = []
    for product, figures in report.get("products", {}).items():
        e2e = figures.get("e2e", {})
        if "dsh" in e2e and "sdk" in e2e:
            dsh_s, sdk_s = (e2e[who]["total_s"]["median"] for who in ("dsh", "sdk"))
            pairs.append(Pair(product, "cold", round(dsh_s * 1000, 1), round(sdk_s * 1000, 1)))
        if "dsh_warm_e2e_ms" in figures and "sdk_e2e_ms" in figures:
            pairs.append(Pair(product, "warm", figures["dsh_warm_e2e_ms"], figures["sdk_e2e_ms"]))
    return pairs


def render(pairs: tuple[Pair, ...] | list[Pair], title: str = "dsh vs the official SDKs") -> str:
    """An SVG document: two bars (dsh, SDK) per pair, labelled with ms and dsh ÷ SDK."""
    if not pairs:
        raise ValueError("pairs: at least one product figure is needed")
    top_ms = max(max(p.dsh_ms, p.sdk_ms) for p in pairs)
    group_w = 2 * BAR_WIDTH + GROUP_GAP
    width = LEFT + group_w * len(pairs) + 20
    height = TOP + PLOT_HEIGHT + 60
    base = TOP + PLOT_HEIGHT
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<text x="{LEFT}" y="20" font-size="14">{escape(title)} (end to end, median ms)</text>',
        f'<line x1="{LEFT}" y1="{base}" x2="{width - 10}" y2="{base}" stroke="#333"/>',
    ]
    for index, pair in enumerate(pairs):
        x = LEFT + index * group_w
        for offset, (who, ms) in enumerate((("dsh", pair.dsh_ms), ("SDK", pair.sdk_ms))):
            h = PLOT_HEIGHT * ms / top_ms
            bx = x + offset * BAR_WIDTH
            out.append(
                f'<rect class="bar" data-who="{who}" x="{bx}" y="{base - h:.1f}" '
                f'width="{BAR_WIDTH - 2}" height="{h:.1f}" fill="{COLOURS[who]}"/>'
            )
            out.append(f'<text x="{bx}" y="{base - h - 4:.1f}">{ms:g}</text>')
        label = escape(f"{pair.product} {pair.mode}")
        out.append(f'<text class="label" x="{x}" y="{base + 16}">{label}</text>')
        ratio = pair.dsh_ms / pair.sdk_ms
        out.append(f'<text x="{x}" y="{base + 30}">{ratio:.2f}x SDK</text>')
    legend_y = height - 10
    out.append(
        f'<rect x="{LEFT}" y="{legend_y - 9}" width="10" height="10" fill="{COLOURS["dsh"]}"/>'
    )
    out.append(f'<text x="{LEFT + 14}" y="{legend_y}">dsh</text>')
    out.append(
        f'<rect x="{LEFT + 50}" y="{legend_y - 9}" width="10" height="10" fill="{COLOURS["SDK"]}"/>'
    )
    out.append(f'<text x="{LEFT + 64}" y="{legend_y}">official SDK</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the chart of the recorded figures.")
    parser.add_argument("--recorded", type=Path, required=True, help="where to write the SVG")
    args = parser.parse_args(argv)
    args.recorded.write_text(render(RECORDED), encoding="utf-8")


if __name__ == "__main__":
    main()
