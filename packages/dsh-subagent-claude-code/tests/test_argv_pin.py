"""Our argv against the SDK's own command builder (read here only), and the child env."""

from __future__ import annotations

import os
from typing import Any

import claude_agent_sdk
import pytest
from claude_agent_sdk import ClaudeAgentOptions
from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport

from dsh.subagent_claude_code._command import bundled_cli, child_env_overlay, cli_argv
from dsh.subagent_claude_code.config import ClaudeCodeProviderConfig
from dsh.subprocess import build_child_env

MODES = ["dontAsk", "acceptEdits", "auto", "plan", "bypassPermissions"]


def _sdk_argv(cli: str, config: ClaudeCodeProviderConfig, system_prompt: Any) -> list[str]:
    disallowed = ["AskUserQuestion"] + (
        ["ExitPlanMode"] if config.permission_mode == "plan" else []
    )
    options = ClaudeAgentOptions(
        cli_path=cli,
        system_prompt=system_prompt,
        permission_mode=config.permission_mode,
        disallowed_tools=disallowed,
        model=config.model,
        permission_prompt_tool_name=None
        if config.permission_mode == "bypassPermissions"
        else "stdio",
        extra_args={"no-session-persistence": None},
        include_partial_messages=True,
    )
    return SubprocessCLITransport(prompt="", options=options)._build_command()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model", [None, "claude-sonnet-5-5"])
def test_argv_matches_the_sdk_builder(mode: str, model: str | None) -> None:
    cli = bundled_cli()
    config = ClaudeCodeProviderConfig(permission_mode=mode, model=model)
    ours = cli_argv(cli, config)
    # With the claude_code preset the SDK passes no system prompt flag: exact equality.
    assert ours == _sdk_argv(cli, config, {"type": "preset", "preset": "claude_code"})
    # The SDK's default adds --system-prompt "" (a ~235 B prompt); we leave it out on purpose.
    stock = _sdk_argv(cli, config, None)
    index = stock.index("--system-prompt")
    assert stock[index + 1] == ""
    assert ours == stock[:index] + stock[index + 2 :]
    assert ("--permission-prompt-tool" in ours) is (mode != "bypassPermissions")
    assert not any(flag.startswith("--setting-sources") for flag in ours)
    assert ours[0] == cli
    assert cli.endswith("/_bundled/claude")


def test_child_env_is_really_scrubbed() -> None:
    ambient = {
        "PATH": "/usr/bin",
        "ANTHROPIC_API_KEY": "sk-ambient",
        "MY_SECRET": "s",
        "DSH_TREE_ID": "x",
        "CLAUDECODE": "1",
        "CLAUDE_CODE_SESSION_ID": "sid",
        "CLAUDE_CODE_CHILD_SESSION": "1",
        "CLAUDE_PID": "12",
        "KEEP_ME": "inherited",
        "GITHUB_TOKEN": "ghp",
    }
    config = ClaudeCodeProviderConfig(
        env={"ANTHROPIC_BASE_URL": "http://127.0.0.1:1", "CLAUDECODE": "1"},
        inherit_env=["GITHUB_TOKEN", "NOT_SET_ANYWHERE"],
    )
    overlay = child_env_overlay(config, cwd="/work", tmp_dir="/tmp/dsh-claude-x", environ=ambient)
    env = build_child_env(overlay, environ=ambient)
    assert env == {
        "PATH": "/usr/bin",
        "KEEP_ME": "inherited",
        "ANTHROPIC_API_KEY": "sk-ambient",  # Claude Code's own credential: forwarded by default
        "GITHUB_TOKEN": "ghp",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:1",
        "CLAUDE_CODE_ENTRYPOINT": "sdk-py",
        "CLAUDE_AGENT_SDK_VERSION": claude_agent_sdk.__version__,
        "PWD": "/work",
        "TMPDIR": "/tmp/dsh-claude-x",
        "CLAUDE_CODE_TMPDIR": "/tmp/dsh-claude-x",
    }
    no_tmp = child_env_overlay(
        ClaudeCodeProviderConfig(private_tmp=False), cwd="/w", tmp_dir=None, environ=ambient
    )
    assert "TMPDIR" not in no_tmp
    assert "CLAUDE_CODE_TMPDIR" not in no_tmp


def test_pinned_versions() -> None:
    from claude_agent_sdk._cli_version import __cli_version__

    assert claude_agent_sdk.__version__ == "0.2.189"
    assert __cli_version__ == "2.1.332"
    assert os.access(bundled_cli(), os.X_OK)
