"""The Codex product's environment: forwarded credentials, the env policy, the tool-env policy.

The product gets the scrubbed (or ``core``) ambient env, the provider's own credential names
(``credential_env``) and the ``inherit_env`` names that are set, then ``env``. Its tool commands
get none of the forwarded names: Codex's own ``shell_environment_policy.exclude`` lists them,
passed as a thread-level config override, so a command running ``env`` cannot print a key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from dsh.subagent import DoctorCheck, credential_checks
from dsh.subagent_codex._config import CodexProviderConfig
from dsh.subprocess import is_credential_env, policy_overlay

__all__ = [
    "CODEX_CONFIG_DIR_ENV",
    "credential_rows",
    "forwarded_names",
    "product_env",
    "tool_env_override",
]

CODEX_CONFIG_DIR_ENV = ("CODEX_HOME", "CODEX_SQLITE_HOME", "CODEX_CA_CERTIFICATE")
"""The product's own config names: the ``core`` policy keeps them."""


def product_env(
    config: CodexProviderConfig, environ: Mapping[str, str] | None = None
) -> dict[str, str | None]:
    """The ``SpawnSpec.env`` overlay: policy tombstones, forwarded names, then ``env``."""
    ambient: Mapping[str, str] = os.environ if environ is None else environ
    env: dict[str, str | None] = dict(
        policy_overlay(config.env_policy, keep=CODEX_CONFIG_DIR_ENV, environ=ambient)
    )
    for name in (*config.credential_env, *config.inherit_env):
        if name in ambient:
            env[name] = ambient[name]
    env.update(config.env)
    return env


def forwarded_names(
    config: CodexProviderConfig, environ: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """The sorted names (never values) the product gets from ``credential_env``, ``inherit_env``
    and ``env``."""
    ambient: Mapping[str, str] = os.environ if environ is None else environ
    names = {n for n in (*config.credential_env, *config.inherit_env) if n in ambient}
    return tuple(sorted(names | set(config.env)))


def _credential_names(config: CodexProviderConfig, ambient: Mapping[str, str]) -> list[str]:
    chosen = {*config.credential_env, *config.inherit_env}
    return [
        name
        for name in forwarded_names(config, ambient)
        if name in chosen or is_credential_env(name, config.env.get(name, ""))
    ]


def tool_env_override(config: CodexProviderConfig) -> dict[str, list[str]]:
    """The thread ``config`` entry that keeps forwarded names out of every tool command.

    Listed: every ``credential_env`` and ``inherit_env`` name and every credential-shaped ``env``
    name (``tool_env`` names excepted). Plain ``env`` names (``RUST_LOG``) still reach tools.
    """
    hidden = {*config.credential_env, *config.inherit_env}
    hidden |= {name for name, value in config.env.items() if is_credential_env(name, value)}
    return {"shell_environment_policy.exclude": sorted(hidden - set(config.tool_env))}


def credential_rows(
    config: CodexProviderConfig, environ: Mapping[str, str] | None = None
) -> list[DoctorCheck]:
    """``dsh doctor`` rows: the credential names Codex will see and whether a login file exists."""
    ambient: Mapping[str, str] = os.environ if environ is None else environ
    home = config.env.get("CODEX_HOME") or ambient.get("CODEX_HOME")
    homes = [Path(home)] if home else [Path(config.env.get("HOME") or Path.home()) / ".codex"]
    return credential_checks(_credential_names(config, ambient), [h / "auth.json" for h in homes])
