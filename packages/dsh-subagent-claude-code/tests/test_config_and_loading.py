"""Config validation, entry-point loading (no process, no PATH lookup), request checks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pydantic
import pytest

from dsh.subagent import ProductFailure, SubagentError, TextBlock, load_provider
from dsh.subagent.kit import DoctorCheck
from dsh.subagent.testing import INVALID_BASE_FIELDS, decoy_program
from dsh.subagent_claude_code import ClaudeCodeProvider, ClaudeCodeProviderConfig
from dsh.subagent_claude_code import _command as command_module
from dsh.subprocess import default_runtime


def test_defaults() -> None:
    config = ClaudeCodeProviderConfig()
    assert config.provider_name == "claude-code"
    assert config.model is None
    assert config.permission_mode == "dontAsk"
    assert config.dispose_grace_ms == 3000
    assert config.private_tmp is True
    assert config.stderr == "forward"
    assert config.nice == "auto"
    assert ClaudeCodeProviderConfig(nice=None).nice is None


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        *INVALID_BASE_FIELDS,
        ({"permission_mode": "default"}, "permission_mode"),
        ({"permission_mode": "manual"}, "permission_mode"),
        ({"stderr": "inherit"}, "stderr"),
        ({"nice": True}, "nice"),
        ({"env": {"A=B": "x"}}, "env"),
        ({"env": {"A\0B": "x"}}, "env"),
        ({"env": {"A": "x\0y"}}, "env"),
        ({"inherit_env": ["A=B"]}, "inherit_env"),
        ({"inherit_env": [""]}, "inherit_env"),
        ({"cli_path": "/usr/bin/claude"}, "cli_path"),
    ],
)
def test_invalid_fields_name_the_field(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        ClaudeCodeProviderConfig.model_validate(fields)
    assert caught.value.errors()[0]["loc"][0] == field


def test_entry_point_loading_starts_nothing_and_skips_path(
    tmp_path: Path, own_marked_processes: Any
) -> None:
    fake_bin, evidence = decoy_program(tmp_path, "claude")
    old_path = os.environ.get("PATH", "")
    os.environ["PATH"] = f"{fake_bin}:{old_path}"
    try:
        provider = load_provider("claude-code", {"provider_name": "cc", "model": "m"})
    finally:
        os.environ["PATH"] = old_path
    assert isinstance(provider, ClaudeCodeProvider)
    assert provider.name == "cc"
    assert provider.config.model == "m"
    assert default_runtime().live == ()
    assert own_marked_processes() == []
    assert not evidence.exists()
    with pytest.raises(SubagentError) as caught:
        load_provider("claude-code", {"permission_mode": "default"})
    assert caught.value.code == "INVALID_PROVIDER_CONFIG"
    assert "permission_mode" in str(caught.value)


async def test_request_checks_spawn_nothing(tmp_path: Path, make_request: Any) -> None:
    provider = ClaudeCodeProvider()
    with pytest.raises(ProductFailure) as caught:
        await provider.start(make_request("task", None))
    assert str(caught.value) == (
        "subagent-claude-code: no working directory for the child — delegate from a parent "
        "session that has one"
    )
    missing = tmp_path / "missing-dir"
    with pytest.raises(ProductFailure) as caught:
        await provider.start(make_request("task", missing))
    assert str(caught.value) == (
        "subagent-claude-code: Product subagent failure (product: Claude Code; "
        "stage: query-start; category: unknown)"
    )
    assert str(missing) not in str(caught.value)
    with pytest.raises(ProductFailure) as caught:
        await provider.start(make_request("task", "relative/dir"))
    assert "stage: query-start; category: unknown" in str(caught.value)
    with pytest.raises(ProductFailure) as caught:
        await provider.start(make_request("  \n ", tmp_path))
    assert str(caught.value) == "subagent-claude-code: the one-shot task must not be empty"

    class ImageBlock:
        type = "image"

    bad = make_request("x", tmp_path)
    object.__setattr__(bad, "prompt", (TextBlock("a"), ImageBlock()))
    with pytest.raises(ProductFailure) as caught:
        await provider.start(bad)
    assert (
        str(caught.value) == "subagent-claude-code: the one-shot task must contain only text blocks"
    )
    assert default_runtime().live == ()


def test_doctor_reports_the_pinned_sdk_and_its_bundled_cli() -> None:
    assert ClaudeCodeProvider().doctor()[:2] == [
        DoctorCheck("claude-agent-sdk version", "0.2.189", True),
        DoctorCheck("Claude Code payload", "present and executable", True),
    ]


def test_doctor_reports_a_missing_bundled_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> str:
        raise command_module.PayloadMissing("the wheel carries no bundled CLI")

    monkeypatch.setattr(command_module, "bundled_cli", missing)
    assert ClaudeCodeProvider().doctor()[1] == DoctorCheck(
        "Claude Code payload", "missing or not executable", False
    )
