"""Claude Code's own credentials are forwarded by default, unset for Bash, and shown by doctor."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from dsh.subagent.kit import DoctorCheck
from dsh.subagent.testing import check_login_file_row
from dsh.subagent_claude_code import (
    CLAUDE_CREDENTIAL_ENV,
    ClaudeCodeProvider,
    ClaudeCodeProviderConfig,
    _env,
)
from dsh.subagent_claude_code._command import child_env_overlay
from dsh.subagent_claude_code._env import make_run_dir, tool_env_script
from dsh.subagent_claude_code.testing import hermetic_env

AMBIENT = {
    "ANTHROPIC_API_KEY": "sk-ant",
    "ANTHROPIC_AUTH_TOKEN": "tok",
    "CLAUDE_CODE_OAUTH_TOKEN": "oauth",
    "ANTHROPIC_BASE_URL": "https://gateway.example",
    "OPENAI_API_KEY": "sk-openai",
    "CODEX_API_KEY": "sk-codex",
    "PATH": "/bin",
    "CLAUDE_CONFIG_DIR": "/c",
    "EDITOR": "vi",
}


def _overlay(config: ClaudeCodeProviderConfig) -> dict[str, str | None]:
    return child_env_overlay(config, cwd="/w", tmp_dir=None, environ=AMBIENT)


def test_the_default_forwards_only_claude_code_credentials() -> None:
    overlay = _overlay(ClaudeCodeProviderConfig())
    forwarded = {name for name in AMBIENT if overlay.get(name) == AMBIENT[name]}
    assert forwarded == {
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
    }
    assert "ANTHROPIC_BASE_URL" in CLAUDE_CREDENTIAL_ENV
    assert not {"OPENAI_API_KEY", "CODEX_API_KEY"} & set(_overlay(ClaudeCodeProviderConfig()))
    assert "ANTHROPIC_API_KEY" not in _overlay(ClaudeCodeProviderConfig(credential_env=[]))


def test_the_core_policy_tombstones_all_but_the_allow_list() -> None:
    overlay = _overlay(ClaudeCodeProviderConfig(env_policy="core", credential_env=[]))
    assert overlay["EDITOR"] is None
    assert overlay["ANTHROPIC_API_KEY"] is None
    assert not {"PATH", "CLAUDE_CONFIG_DIR"} & {n for n, v in overlay.items() if v is None}
    # The field checks (env_policy, credential_env, tool_env): INVALID_BASE_FIELDS, in
    # test_config_and_loading.py.


def test_the_bash_env_script_unsets_every_forwarded_name() -> None:
    config = ClaudeCodeProviderConfig(
        inherit_env=["GITHUB_TOKEN", "PLAIN", "not-a-shell-name"],
        env={"DB": "postgres://u:pw@h/db", "RUST_LOG": "x", "CLAUDE_ENV_FILE": "/o/it's.sh"},
        tool_env=["PLAIN"],
    )
    assert tool_env_script(config) == (
        ". '/o/it'\"'\"'s.sh'\n"
        "unset ANTHROPIC_API_KEY ANTHROPIC_AUTH_TOKEN ANTHROPIC_BASE_URL "
        "ANTHROPIC_BEDROCK_BASE_URL ANTHROPIC_FOUNDRY_BASE_URL ANTHROPIC_VERTEX_BASE_URL "
        "CLAUDE_CODE_OAUTH_TOKEN DB GITHUB_TOKEN\n"
    )
    run_dir, script = make_run_dir(config)
    try:
        assert Path(script).read_text() == tool_env_script(config)
        assert Path(script).stat().st_mode & 0o777 == 0o400
        overlay = child_env_overlay(config, cwd="/w", tmp_dir=None, env_file=script)
        assert overlay["CLAUDE_ENV_FILE"] == script
    finally:
        Path(script).unlink()
        Path(run_dir).rmdir()


def test_the_hermetic_kit_blanks_the_developers_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "developer-token")
    monkeypatch.setenv("CLAUDE_CODE_OAUTH_TOKEN", "developer-oauth")
    env = hermetic_env(tmp_path, "http://127.0.0.1:9")
    overlay = child_env_overlay(ClaudeCodeProviderConfig(env=env), cwd="/w", tmp_dir=None)
    assert overlay["ANTHROPIC_AUTH_TOKEN"] == ""
    assert overlay["CLAUDE_CODE_OAUTH_TOKEN"] == ""
    assert overlay["ANTHROPIC_API_KEY"] == "sk-ant-dsh-fake-key"


def test_doctor_names_credential_sources_never_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in CLAUDE_CREDENTIAL_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret-value")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path))
    provider = ClaudeCodeProvider(ClaudeCodeProviderConfig(inherit_env=["NOT_SET"]))
    assert provider.doctor()[3:] == [
        DoctorCheck("credential variables", "ANTHROPIC_API_KEY", True),
        DoctorCheck("login file", "absent", True),
    ]
    check_login_file_row(provider, tmp_path, secret="sk-secret-value")  # .credentials.json
    assert provider.forwarded_env_names() == ("ANTHROPIC_API_KEY",)


def _gone(path: str) -> bool:
    return not Path(path).exists()


async def test_a_run_dir_made_for_a_cancelled_start_is_removed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    made: list[str] = []
    real = _env.make_run_dir

    def slow(config: ClaudeCodeProviderConfig) -> tuple[str, str]:
        release.wait(10)
        run_dir, script = real(config)
        made.append(run_dir)
        return run_dir, script

    monkeypatch.setattr(_env, "make_run_dir", slow)
    making = asyncio.ensure_future(_env.make_run_dir_off_loop(ClaudeCodeProviderConfig()))
    await asyncio.sleep(0.05)
    making.cancel()
    with pytest.raises(asyncio.CancelledError):
        await making
    release.set()  # the thread makes the dir only now, after its caller is gone
    for _ in range(1000):
        if made and _gone(made[0]):
            break
        await asyncio.sleep(0.01)
    assert made, "the worker thread never made the dir"
    assert _gone(made[0])
