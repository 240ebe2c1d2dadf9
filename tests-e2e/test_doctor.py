"""``dsh doctor`` on the real workspace install: both products, pinned, with usable payloads."""

from __future__ import annotations

from importlib.metadata import version

import pytest

from dsh.tool_subagent._cli import main


def test_doctor_reports_both_pinned_products_healthy(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # no cell wraps
    rc = main(["doctor"])
    out = capsys.readouterr().out
    rows = {
        tuple(cell.strip() for cell in line.strip().strip("│").split("│"))
        for line in out.splitlines()
        if line.startswith("│")
    }
    codex, claude = "dsh-subagent-codex", "dsh-subagent-claude-code"
    assert rows == {
        ("codex", "package", f"{codex} {version(codex)}", "yes"),
        ("codex", "Codex version", "0.163.0", "yes"),
        ("codex", "Codex payload", "present and executable", "yes"),
        ("claude-code", "package", f"{claude} {version(claude)}", "yes"),
        ("claude-code", "claude-agent-sdk version", "0.2.189", "yes"),
        ("claude-code", "Claude Code payload", "present and executable", "yes"),
    }
    assert rc == 0
