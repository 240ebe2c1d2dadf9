"""Codex's own credentials are forwarded by default, hidden from tools, and shown by doctor."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.subagent.kit import DoctorCheck
from dsh.subagent.testing import check_login_file_row
from dsh.subagent_codex import CODEX_CREDENTIAL_ENV, CodexProvider, CodexProviderConfig
from dsh.subagent_codex._env import forwarding, tool_env_override
from dsh.subagent_codex.testing import hermetic_env

AMBIENT = {
    "OPENAI_API_KEY": "sk-openai",
    "CODEX_API_KEY": "sk-codex",
    "ANTHROPIC_API_KEY": "sk-ant",
    "CLAUDE_CODE_OAUTH_TOKEN": "oauth",
    "PATH": "/bin",
    "CODEX_HOME": "/c",
    "EDITOR": "vi",
}


def test_the_default_forwards_only_codex_credentials() -> None:
    env = forwarding(CodexProviderConfig()).overlay(AMBIENT)
    assert env == {"OPENAI_API_KEY": "sk-openai", "CODEX_API_KEY": "sk-codex"}
    assert set(CODEX_CREDENTIAL_ENV) == {"OPENAI_API_KEY", "CODEX_API_KEY"}
    assert forwarding(CodexProviderConfig(credential_env=())).overlay(AMBIENT) == {}


def test_core_policy_tombstones_everything_outside_the_allow_list() -> None:
    env = forwarding(CodexProviderConfig(env_policy="core", env={"EDITOR": "ed"})).overlay(AMBIENT)
    assert env["EDITOR"] == "ed", "an explicit env name always wins"
    assert env["ANTHROPIC_API_KEY"] is None
    assert env["CLAUDE_CODE_OAUTH_TOKEN"] is None
    assert not {"PATH", "CODEX_HOME"} & set(env), "kept names need no tombstone"
    # The field checks (env_policy, credential_env, tool_env): INVALID_BASE_FIELDS, in
    # test_provider_rules.py.


def test_every_forwarded_or_credential_shaped_name_is_hidden_from_tools() -> None:
    config = CodexProviderConfig(
        inherit_env=("GITHUB_TOKEN", "PLAIN"),
        env={"DEEPSEEK_API_KEY": "k", "DB": "postgres://u:pw@h/db", "RUST_LOG": "info"},
        tool_env=("PLAIN",),
    )
    assert tool_env_override(config) == {
        "shell_environment_policy.exclude": [
            "CODEX_API_KEY",
            "DB",
            "DEEPSEEK_API_KEY",
            "GITHUB_TOKEN",
            "OPENAI_API_KEY",
        ]
    }


def test_the_hermetic_kit_blanks_the_developers_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-developer")
    env = forwarding(CodexProviderConfig(env=hermetic_env(tmp_path))).overlay()
    assert env["OPENAI_API_KEY"] == ""
    assert env["CODEX_API_KEY"] == ""


def test_doctor_names_credential_sources_never_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    monkeypatch.delenv("CODEX_API_KEY", raising=False)
    monkeypatch.setenv("CODEX_HOME", str(tmp_path))
    provider = CodexProvider(CodexProviderConfig(env={"MY_PROVIDER_KEY": "k", "RUST_LOG": "x"}))
    rows = provider.doctor()[3:]
    assert rows == [
        DoctorCheck("credential variables", "MY_PROVIDER_KEY, OPENAI_API_KEY", True),
        DoctorCheck("login file", "absent", True),
    ]
    check_login_file_row(provider, tmp_path, secret="sk-secret-value")  # auth.json
    assert provider.forwarded_env_names() == ("MY_PROVIDER_KEY", "OPENAI_API_KEY", "RUST_LOG")
