"""``ClaudeCodeProviderConfig``: the validated configuration of one Claude Code provider."""

from __future__ import annotations

from typing import ClassVar, Literal

from dsh.subagent.kit import ProviderConfigBase

__all__ = ["CLAUDE_CREDENTIAL_ENV", "ClaudeCodeProviderConfig", "PermissionMode"]

CLAUDE_CREDENTIAL_ENV = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_BEDROCK_BASE_URL",
    "ANTHROPIC_VERTEX_BASE_URL",
    "ANTHROPIC_FOUNDRY_BASE_URL",
)
"""Claude Code's own credential and base-URL names, forwarded by default (no other product's)."""

PermissionMode = Literal["dontAsk", "acceptEdits", "auto", "plan", "bypassPermissions"]


class ClaudeCodeProviderConfig(ProviderConfigBase):
    """One named Claude Code provider instance (snake_case, frozen, unknown fields rejected).

    The name, model, env, forwarding, grace, stderr and niceness fields come from
    ``ProviderConfigBase`` (``tool_env`` names what the Bash tool's commands may still see).
    Login, model provider, base URL and retries stay native Claude Code configuration, supplied
    through ``env`` and ``inherit_env``. Under ``isolation = "private"`` each run's CLI gets its
    own ``HOME`` and ``CLAUDE_CONFIG_DIR`` in its run dir (``home_template`` copied into the
    config dir), no setting sources and only the MCP servers dsh passes (none).
    """

    private_home_env: ClassVar[tuple[str, ...]] = ("HOME", "CLAUDE_CONFIG_DIR")

    provider_name: str = "claude-code"
    credential_env: tuple[str, ...] = CLAUDE_CREDENTIAL_ENV
    """Ambient credential names forwarded when set; ``[]`` forwards none. Tools never see them."""
    permission_mode: PermissionMode = "dontAsk"
    private_tmp: bool = True
