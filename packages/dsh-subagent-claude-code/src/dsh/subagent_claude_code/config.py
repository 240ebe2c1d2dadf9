"""``ClaudeCodeProviderConfig``: the validated configuration of one Claude Code provider."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from dsh.subagent import check_env_names, check_env_overlay
from dsh.subprocess import EnvPolicy

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

_MAX_GRACE_MS = 2_147_483_647


class ClaudeCodeProviderConfig(BaseModel):
    """One named Claude Code provider instance (snake_case, frozen, unknown fields rejected).

    Login, model provider, base URL and retries stay native Claude Code configuration, supplied
    through ``env`` and ``inherit_env``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider_name: str = Field(default="claude-code", min_length=1)
    model: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    inherit_env: list[str] = Field(default_factory=list)
    credential_env: list[str] = Field(default_factory=lambda: list(CLAUDE_CREDENTIAL_ENV))
    """Ambient credential names forwarded when set; ``[]`` forwards none. Tools never see them."""
    env_policy: EnvPolicy = "scrub"
    """``scrub`` (ambient env minus credentials) or ``core`` (an allow-list; see dsh.subprocess)."""
    tool_env: list[str] = Field(default_factory=list)
    """Forwarded names that Bash commands may still see (every other forwarded name is unset)."""
    permission_mode: PermissionMode = "dontAsk"
    dispose_grace_ms: float = Field(default=3000, gt=0, le=_MAX_GRACE_MS)
    private_tmp: bool = True
    stderr: Literal["forward", "discard"] = "forward"
    nice: int | None = Field(default=10, ge=0, le=19, strict=True)
    """The product tree's CPU niceness (see ``SpawnSpec.nice``); None keeps the harness's."""

    @field_validator("provider_name")
    @classmethod
    def _name_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("provider_name must be non-empty")
        return value

    @field_validator("model")
    @classmethod
    def _model_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("model must be non-empty when set")
        return value

    @field_validator("env")
    @classmethod
    def _env_valid(cls, value: dict[str, str]) -> dict[str, str]:
        check_env_overlay(value)
        return value

    @field_validator("inherit_env", "credential_env", "tool_env")
    @classmethod
    def _inherit_names(cls, value: list[str], info: ValidationInfo) -> list[str]:
        check_env_names(value, info.field_name or "inherit_env")
        return value
