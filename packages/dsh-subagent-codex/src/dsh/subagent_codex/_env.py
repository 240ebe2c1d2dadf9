"""The Codex product's environment: forwarded credentials, the env policy, the tool-env policy.

The product gets the scrubbed (or ``core``) ambient env, the provider's own credential names
(``credential_env``) and the ``inherit_env`` names that are set, then ``env``. Its tool commands
get none of the forwarded names: Codex's own ``shell_environment_policy.exclude`` lists them,
passed as a thread-level config override, so a command running ``env`` cannot print a key.
"""

from __future__ import annotations

from dsh.subagent_codex.config import CodexProviderConfig
from dsh.subprocess import EnvForwarding

__all__ = ["CODEX_CONFIG_DIR_ENV", "forwarding", "tool_env_override"]

CODEX_CONFIG_DIR_ENV = ("CODEX_HOME", "CODEX_SQLITE_HOME", "CODEX_CA_CERTIFICATE")
"""The product's own config names: the ``core`` policy keeps them."""


def forwarding(config: CodexProviderConfig) -> EnvForwarding:
    """The config's env fields as one ``EnvForwarding`` (overlay, names, hidden names)."""
    return EnvForwarding.of(config, keep=CODEX_CONFIG_DIR_ENV)


def tool_env_override(config: CodexProviderConfig) -> dict[str, list[str]]:
    """The thread ``config`` entry that keeps forwarded names out of every tool command.

    A dotted key, so the rest of the deployment's ``shell_environment_policy`` still applies.
    """
    return {"shell_environment_policy.exclude": forwarding(config).hidden()}
