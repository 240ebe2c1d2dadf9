"""The bundled CLI, its argv and its child environment (built by us, pinned against the SDK)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path

from dsh.subagent_claude_code._env import forwarding
from dsh.subagent_claude_code.config import ClaudeCodeProviderConfig

__all__ = [
    "SESSION_MARKERS",
    "bundled_cli",
    "child_env_overlay",
    "cli_argv",
    "run_dir_overlay",
]

SESSION_MARKERS = (
    "CLAUDECODE",
    "CLAUDE_CODE_SESSION_ID",
    "CLAUDE_CODE_CHILD_SESSION",
    "CLAUDE_PID",
)
"""Set by an enclosing Claude Code session; removed so nested runs work."""

_DERIVED_CLIENT_APP_ENV = "CLAUDE_AGENT_SDK_DERIVED_CLIENT_APP"


class PayloadMissing(Exception):
    """The bundled CLI is missing or not executable (the raw reason stays here)."""


def bundled_cli() -> str:
    """The path of the CLI bundled in the installed ``claude-agent-sdk`` wheel; no fallback."""
    # Found without importing the SDK (its import loads the MCP SDK too; docs/performance.md,
    # "Start-up"): the CLI sits beside the package's __init__.
    spec = importlib.util.find_spec("claude_agent_sdk")
    if spec is None or spec.origin is None:
        raise PayloadMissing("claude-agent-sdk is not installed")
    path = Path(spec.origin).parent / "_bundled" / "claude"
    if not path.is_file():
        raise PayloadMissing("the claude-agent-sdk wheel carries no bundled CLI")
    if not os.access(path, os.X_OK):
        raise PayloadMissing("the bundled CLI is not executable")
    return str(path)


def disallowed_tools(config: ClaudeCodeProviderConfig) -> list[str]:
    tools = ["AskUserQuestion"]
    if config.permission_mode == "plan":
        tools.append("ExitPlanMode")
    return tools


def cli_argv(cli: str, config: ClaudeCodeProviderConfig) -> list[str]:
    """The CLI's argv, in the order the SDK's own builder uses (see tests/test_argv_pin.py)."""
    argv = [cli, "--output-format", "stream-json", "--verbose"]
    argv += ["--disallowedTools", ",".join(disallowed_tools(config))]
    if config.model is not None:
        argv += ["--model", config.model]
    if config.permission_mode != "bypassPermissions":
        argv += ["--permission-prompt-tool", "stdio"]
    argv += ["--permission-mode", config.permission_mode]
    # One stream_event frame per model SSE event: a model that is still answering keeps the
    # run's activity stamp moving (the caller's stall limit, docs/liveness.md).
    argv += ["--include-partial-messages"]
    argv += ["--no-session-persistence"]
    argv += ["--input-format", "stream-json"]
    if config.isolation == "private":
        # No user, project or local settings and only the MCP servers dsh passes (none): the
        # private HOME and CLAUDE_CONFIG_DIR already hide the user's own; this also keeps the
        # project's (.claude/ and .mcp.json in the cwd) out.
        argv += ["--setting-sources=", "--strict-mcp-config"]
    return argv


def child_env_overlay(
    config: ClaudeCodeProviderConfig,
    *,
    cwd: str,
    tmp_dir: str | None,
    env_file: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str | None]:
    """The overlay for ``build_child_env``: policy tombstones, forwarded names, ``env``, SDK
    names, session tombstones, and ``CLAUDE_ENV_FILE`` (the Bash-tool env script) when given."""
    ambient: Mapping[str, str] = os.environ if environ is None else environ
    overlay = forwarding(config).overlay(ambient)
    overlay.setdefault("CLAUDE_CODE_ENTRYPOINT", "sdk-py")
    import claude_agent_sdk  # a run is starting: its transport imports the SDK anyway

    overlay["CLAUDE_AGENT_SDK_VERSION"] = claude_agent_sdk.__version__
    overlay["PWD"] = cwd
    for name in (*SESSION_MARKERS, _DERIVED_CLIENT_APP_ENV):
        overlay[name] = None
    overlay.update(run_dir_overlay(tmp_dir, env_file))
    return overlay


def run_dir_overlay(tmp_dir: str | None, env_file: str | None) -> dict[str, str | None]:
    """The names that point into one process's own run dir (set last, over everything else)."""
    overlay: dict[str, str | None] = {}
    if tmp_dir is not None:
        overlay["TMPDIR"] = tmp_dir
        overlay["CLAUDE_CODE_TMPDIR"] = tmp_dir
    if env_file is not None:
        overlay["CLAUDE_ENV_FILE"] = env_file
    return overlay
