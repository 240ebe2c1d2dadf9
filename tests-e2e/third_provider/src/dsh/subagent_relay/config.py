"""``RelayProviderConfig``: the validated configuration of one Relay provider."""

from __future__ import annotations

from typing import ClassVar

from dsh.subagent.kit import ProviderConfigBase

__all__ = ["RELAY_CREDENTIAL_ENV", "RelayProviderConfig"]

RELAY_CREDENTIAL_ENV = ("RELAY_API_KEY", "RELAY_BASE_URL")
"""Relay's own credential and base-URL names, forwarded by default (no other product's)."""


class RelayProviderConfig(ProviderConfigBase):
    """One named Relay provider instance (snake_case, frozen, unknown fields rejected).

    Every field comes from ``ProviderConfigBase``; the product runs no tool commands, so
    ``tool_env`` has nothing to hide from. Under ``isolation = "private"`` each process gets its
    own ``HOME`` (the ``home_template``'s copy).
    """

    private_home_env: ClassVar[tuple[str, ...]] = ("HOME",)

    provider_name: str = "relay"
    credential_env: tuple[str, ...] = RELAY_CREDENTIAL_ENV
    """Ambient credential names forwarded when set; ``[]`` forwards none."""
