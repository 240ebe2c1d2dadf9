"""``CodexProviderConfig``: the validated, frozen configuration of one Codex provider instance."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from dsh.subagent import check_env_names, check_env_overlay
from dsh.subprocess import EnvPolicy

__all__ = ["CODEX_CREDENTIAL_ENV", "CodexProviderConfig", "PermissionMode"]

CODEX_CREDENTIAL_ENV = ("OPENAI_API_KEY", "CODEX_API_KEY")
"""Codex's own standard credential variables, forwarded by default (never another product's)."""

PermissionMode = Literal["never", "approve-for-me", "dangerously-bypass-approvals-and-sandbox"]


class CodexProviderConfig(BaseModel):
    """One Codex provider instance (snake_case fields; frozen; unknown fields are rejected).

    Everything not listed here (``CODEX_HOME``, login, model provider, MCP servers, retries) is
    native Codex configuration that the deployment supplies through ``env`` and ``CODEX_HOME``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider_name: str = Field(default="codex", min_length=1)
    model: str | None = Field(default=None, min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    inherit_env: tuple[str, ...] = ()
    credential_env: tuple[str, ...] = CODEX_CREDENTIAL_ENV
    """Ambient credential names forwarded when set; ``[]`` forwards none. Tools never see them."""
    env_policy: EnvPolicy = "scrub"
    """``scrub`` (ambient env minus credentials) or ``core`` (an allow-list; see dsh.subprocess)."""
    tool_env: tuple[str, ...] = ()
    """Forwarded names that tool commands may still see (every other forwarded name is hidden)."""
    permission_mode: PermissionMode = "never"
    dispose_grace_ms: float = Field(default=3000.0, gt=0, le=2147483647)
    stderr: Literal["forward", "discard"] = "forward"
    nice: int | None = Field(default=10, ge=0, le=19, strict=True)
    """The product tree's CPU niceness (see ``SpawnSpec.nice``); None keeps the harness's."""

    @field_validator("provider_name")
    @classmethod
    def _name_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("provider_name must not be blank")
        return value

    @field_validator("model")
    @classmethod
    def _model_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("model must not be blank when set")
        return value

    @field_validator("env")
    @classmethod
    def _env_valid(cls, value: dict[str, str]) -> dict[str, str]:
        check_env_overlay(value)
        return value

    @field_validator("inherit_env", "credential_env", "tool_env")
    @classmethod
    def _names_valid(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        check_env_names(value, info.field_name or "inherit_env")
        return value
