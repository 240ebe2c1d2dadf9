"""``ProviderConfigBase``: the fields and checks every product provider config shares.

Both product configs forward env the same way (through ``dsh.subprocess``'s forwarding rules),
dispose a tree with the same grace ladder and run it at the same niceness, so those fields, their
defaults and their checks live here once. A provider subclass adds its own ``provider_name`` and
``model`` (their defaults and wording are the provider's), its ``credential_env`` default and its
product-specific fields.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from dsh.subagent._env_config import check_env_names, check_env_overlay
from dsh.subprocess import MAX_GRACE_MS, EnvForwarding, EnvPolicy

__all__ = ["ProviderConfigBase"]


class ProviderConfigBase(BaseModel):
    """The shared part of a provider instance's config (snake_case, frozen, no unknown fields)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    env: dict[str, str] = Field(default_factory=dict)
    """Variables set in the product's env after forwarding, checked so ``execve`` takes them."""
    inherit_env: tuple[str, ...] = ()
    """Ambient names forwarded when set, beyond ``credential_env``."""
    credential_env: tuple[str, ...] = ()
    """Ambient credential names forwarded when set; ``[]`` forwards none. Tools never see them."""
    env_policy: EnvPolicy = "scrub"
    """``scrub`` (ambient env minus credentials) or ``core`` (an allow-list; see dsh.subprocess)."""
    tool_env: tuple[str, ...] = ()
    """Forwarded names that the product's tool commands may still see (the others are hidden)."""
    dispose_grace_ms: float = Field(default=3000.0, gt=0, le=MAX_GRACE_MS)
    """SIGTERM-to-SIGKILL grace when the tree is disposed (``SpawnSpec.grace_ms``)."""
    stderr: Literal["forward", "discard"] = "forward"
    nice: int | None = Field(default=10, ge=0, le=19, strict=True)
    """The product tree's CPU niceness (see ``SpawnSpec.nice``); None keeps the harness's."""

    def env_forwarding(self, keep: tuple[str, ...] = ()) -> EnvForwarding:
        """The env fields as one ``EnvForwarding``; ``keep`` names the product's config dirs.

        ``credential_env`` then ``inherit_env`` are forwarded when set, ``env`` is laid on top,
        ``tool_env`` names stay visible to tool commands, and ``keep`` survives the ``core`` policy.
        """
        return EnvForwarding(
            policy=self.env_policy,
            keep=keep,
            forward=(*self.credential_env, *self.inherit_env),
            env=self.env,
            tool_visible=self.tool_env,
        )

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
