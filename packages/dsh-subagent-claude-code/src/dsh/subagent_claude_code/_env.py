"""Claude Code's environment: forwarded credentials, the env policy, and the Bash-tool env.

The CLI gets the scrubbed (or ``core``) ambient env, the provider's own credential names
(``credential_env``) and the ``inherit_env`` names that are set, then ``env``. Its Bash commands
get none of the forwarded names: the CLI runs the script named by ``CLAUDE_ENV_FILE`` ahead of
every Bash command, and ours unsets them. (``CLAUDE_CODE_SUBPROCESS_ENV_SCRUB=1``, the CLI's own
scrub, refuses to start at 2.1.332 unless bubblewrap is installed, and scrubs only Anthropic and
cloud names; see docs/decisions.md.)
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
from collections.abc import Mapping
from pathlib import Path

from dsh.subagent import DoctorCheck, credential_checks
from dsh.subagent_claude_code.config import ClaudeCodeProviderConfig
from dsh.subprocess import is_credential_env, policy_overlay

__all__ = [
    "CLAUDE_CONFIG_DIR_ENV",
    "ENV_FILE_NAME",
    "credential_rows",
    "forwarded_env",
    "forwarded_names",
    "hidden_names",
    "make_run_dir",
    "tool_env_script",
]

CLAUDE_CONFIG_DIR_ENV = ("CLAUDE_CONFIG_DIR",)
"""The product's own config names: the ``core`` policy keeps them."""

ENV_FILE_NAME = "dsh-tool-env.sh"
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def forwarded_env(
    config: ClaudeCodeProviderConfig, environ: Mapping[str, str]
) -> dict[str, str | None]:
    """Policy tombstones, then the set ``credential_env`` and ``inherit_env`` names."""
    env: dict[str, str | None] = dict(
        policy_overlay(config.env_policy, keep=CLAUDE_CONFIG_DIR_ENV, environ=environ)
    )
    for name in (*config.credential_env, *config.inherit_env):
        if name in environ:
            env[name] = environ[name]
    return env


def forwarded_names(
    config: ClaudeCodeProviderConfig, environ: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """The sorted names (never values) the CLI gets from ``credential_env``, ``inherit_env``
    and ``env``."""
    ambient: Mapping[str, str] = os.environ if environ is None else environ
    names = {n for n in (*config.credential_env, *config.inherit_env) if n in ambient}
    return tuple(sorted(names | set(config.env)))


def hidden_names(config: ClaudeCodeProviderConfig) -> list[str]:
    """Every forwarded and credential-shaped ``env`` name, minus ``tool_env`` (sorted)."""
    hidden = {*config.credential_env, *config.inherit_env}
    hidden |= {name for name, value in config.env.items() if is_credential_env(name, value)}
    return sorted(hidden - set(config.tool_env))


def tool_env_script(config: ClaudeCodeProviderConfig) -> str:
    """The ``CLAUDE_ENV_FILE`` script: the deployment's own env file first, then ``unset``.

    Names that are no shell identifier cannot be shell variables, so they are left out.
    """
    lines = []
    own = config.env.get("CLAUDE_ENV_FILE")
    if own:
        lines.append(f". {shlex.quote(own)}")
    names = [name for name in hidden_names(config) if _SHELL_NAME.fullmatch(name)]
    if names:
        lines.append("unset " + " ".join(names))
    return "\n".join(lines) + "\n"


def make_run_dir(config: ClaudeCodeProviderConfig) -> tuple[str, str]:
    """A fresh run-owned dir holding the ``CLAUDE_ENV_FILE`` script: ``(dir, script path)``."""
    run_dir = tempfile.mkdtemp(prefix=f"dsh-claude-{os.getpid()}-")
    script = Path(run_dir) / ENV_FILE_NAME
    script.write_text(tool_env_script(config), encoding="utf-8")
    return run_dir, str(script)


def credential_rows(
    config: ClaudeCodeProviderConfig, environ: Mapping[str, str] | None = None
) -> list[DoctorCheck]:
    """``dsh doctor`` rows: the credential names the CLI will see and whether a login exists."""
    ambient: Mapping[str, str] = os.environ if environ is None else environ
    chosen = {*config.credential_env, *config.inherit_env}
    names = [
        name
        for name in forwarded_names(config, ambient)
        if name in chosen or is_credential_env(name, config.env.get(name, ""))
    ]
    config_dir = config.env.get("CLAUDE_CONFIG_DIR") or ambient.get("CLAUDE_CONFIG_DIR")
    home = Path(config.env.get("HOME") or Path.home())
    root = Path(config_dir) if config_dir else home / ".claude"
    return credential_checks(names, [root / ".credentials.json"])
