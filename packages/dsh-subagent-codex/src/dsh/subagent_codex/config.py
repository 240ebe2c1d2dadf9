"""``CodexProviderConfig``: the validated, frozen configuration of one Codex provider instance."""

from __future__ import annotations

from typing import ClassVar, Literal

from dsh.subagent.kit import ProviderConfigBase

__all__ = ["CODEX_CREDENTIAL_ENV", "CodexProviderConfig", "PermissionMode"]

CODEX_CREDENTIAL_ENV = ("OPENAI_API_KEY", "CODEX_API_KEY")
"""Codex's own standard credential variables, forwarded by default (never another product's)."""

PermissionMode = Literal["never", "approve-for-me", "dangerously-bypass-approvals-and-sandbox"]


class CodexProviderConfig(ProviderConfigBase):
    """One Codex provider instance (snake_case fields; frozen; unknown fields are rejected).

    The name, model, env, forwarding, grace, stderr and niceness fields come from
    ``ProviderConfigBase``.
    Everything not listed (``CODEX_HOME``, login, model provider, MCP servers, retries) is native
    Codex configuration that the deployment supplies through ``env`` and ``CODEX_HOME``, or,
    under ``isolation = "private"``, through ``home_template`` (copied into each run's own
    ``CODEX_HOME``).
    """

    private_home_env: ClassVar[tuple[str, ...]] = ("CODEX_HOME", "CODEX_SQLITE_HOME", "HOME")

    provider_name: str = "codex"
    credential_env: tuple[str, ...] = CODEX_CREDENTIAL_ENV
    """Ambient credential names forwarded when set; ``[]`` forwards none. Tools never see them."""
    permission_mode: PermissionMode = "never"
