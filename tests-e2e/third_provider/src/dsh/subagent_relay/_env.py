"""Relay's environment: the forwarded credentials and the env policy.

The agent gets the scrubbed (or ``core``) ambient env, ``credential_env`` and the ``inherit_env``
names that are set, then ``env``. It runs no tool commands, so nothing is hidden from tools.
"""

from __future__ import annotations

from dsh.subagent_relay.config import RelayProviderConfig
from dsh.subprocess import EnvForwarding

__all__ = ["RELAY_CONFIG_DIR_ENV", "forwarding"]

RELAY_CONFIG_DIR_ENV = ("RELAY_HOME",)
"""The product's own config names: the ``core`` policy keeps them."""


def forwarding(config: RelayProviderConfig) -> EnvForwarding:
    """The config's env fields as one ``EnvForwarding``."""
    return EnvForwarding.of(config, keep=RELAY_CONFIG_DIR_ENV)
