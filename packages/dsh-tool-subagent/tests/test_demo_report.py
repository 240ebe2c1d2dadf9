"""The demo's pure parts: what to install when a product is missing, and the summary line."""

from __future__ import annotations

import io

from rich.console import Console

from dsh.tool_subagent._demo.command import DemoReport, Row, missing_providers, render
from dsh.tool_subagent._demo.scenarios import _unexpected


def test_missing_providers_names_the_extra() -> None:
    assert missing_providers(["codex", "claude-code"]) is None
    assert missing_providers(["claude-code", "codex", "other"]) is None
    assert missing_providers(["claude-code"]) == (
        'the Codex provider is not installed; install it with pip install "dsh-tool-subagent'
        '[codex]" (or "dsh-tool-subagent[all]" for everything)'
    )
    assert missing_providers(["codex"]) == (
        "the Claude Code provider is not installed; install it with pip install"
        ' "dsh-tool-subagent[claude-code]" (or "dsh-tool-subagent[all]" for everything)'
    )
    assert missing_providers([]) == (
        "the Codex provider and the Claude Code provider are not installed; install them with"
        ' pip install "dsh-tool-subagent[all]"'
    )


def _row(ok: bool, scenario: str = "foreground answer") -> Row:
    return Row(scenario, "Codex", "answer: [status: completed]", 0.25, ok)


def test_report_is_ok_only_when_every_row_is_and_nothing_is_left() -> None:
    good = DemoReport((_row(True), _row(True)), 1.25)
    assert good.ok
    assert good.summary.startswith("All 2 scenarios behaved as expected in 1.2 s: ")
    bad = DemoReport((_row(True), _row(False, "model failure")), 2.0, leftover=3)
    assert not bad.ok
    assert bad.summary == (
        "1 of 2 scenarios did not behave as expected (marked ✗): model failure / Codex;"
        " 3 marked process(es) outlived the demo. Run `dsh doctor` to check the installed"
        " products."
    )
    assert not DemoReport((_row(True),), 1.0, leftover=1).ok
    assert not DemoReport((), 0.0).ok
    assert not DemoReport((), 0.0, problem="x").ok


def test_render_prints_one_table_and_the_summary() -> None:
    buffer = io.StringIO()
    report = DemoReport((_row(True), _row(False, "model failure")), 2.0)
    render(report, Console(file=buffer, width=120))
    lines = buffer.getvalue().splitlines()
    assert "│ foreground answer │ Codex   │ ✓ answer: [status: completed] │ 0.2 s │" in lines
    assert "│ model failure     │ Codex   │ ✗ answer: [status: completed] │ 0.2 s │" in lines
    assert lines[-1] == report.summary
    assert sum(line.startswith("┏") for line in lines) == 1


def test_a_late_difference_is_shown_not_cut_away() -> None:
    shared = "subagent run failed ⏎ Diagnostic: Product subagent failure (product: Claude Code; "
    expected = shared * 2 + "category: authentication)"
    got = shared * 2 + "category: connection)"
    ok, line = _unexpected(expected, got)
    assert not ok
    assert "authentication)" in line
    assert "connection)" in line
    # Short texts are shown whole.
    assert _unexpected("yes", "no") == (False, "expected 'yes', got 'no'")
