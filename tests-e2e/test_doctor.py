"""``dsh doctor`` on the real workspace install: both products, pinned, with usable payloads."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

import pytest

from dsh.subagent_claude_code import CLAUDE_CREDENTIAL_ENV
from dsh.subagent_codex import CODEX_CREDENTIAL_ENV
from dsh.tool_subagent._cli import main


def test_doctor_reports_both_pinned_products_healthy(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # no cell wraps
    for name in (*CODEX_CREDENTIAL_ENV, *CLAUDE_CREDENTIAL_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-value-never-shown")
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    (tmp_path / "codex").mkdir()
    (tmp_path / "codex" / "auth.json").write_text("{}")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
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
        ("codex", "credential variables", "none", "yes"),
        ("codex", "login file", "exists", "yes"),
        ("claude-code", "package", f"{claude} {version(claude)}", "yes"),
        ("claude-code", "claude-agent-sdk version", "0.2.189", "yes"),
        ("claude-code", "Claude Code payload", "present and executable", "yes"),
        ("claude-code", "credential variables", "ANTHROPIC_API_KEY", "yes"),
        ("claude-code", "login file", "absent", "yes"),
    }
    assert rc == 0
    assert "sk-ant-value-never-shown" not in out
