"""How a Codex process authenticates: the login file it has, or a forwarded key logged in.

The app-server does not read ``OPENAI_API_KEY`` or ``CODEX_API_KEY`` from its environment for the
built-in ``openai`` provider (0.163.0): a run with only an exported key sends its model request
without an ``Authorization`` header, and a run with no credentials at all waits forever. So the
provider asks ``account/read`` after ``initialize`` and decides:

- an account, or a model provider that needs no OpenAI auth: nothing to do;
- no account, and a forwarded key: ``account/login/start`` logs the key in. The process was then
  started with ``cli_auth_credentials_store = "ephemeral"``, so the login lives in the process's
  memory and is never written into the user's ``CODEX_HOME``;
- no account and no key: the start fails at once (stage ``auth``, category ``unauthorized``).

A forwarded key is used only when ``CODEX_HOME`` has no login file: an existing ``codex login``
wins, as it does for the product itself. The ephemeral store does not read ``auth.json``, which
is why the choice is made before the spawn.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dsh.subagent.kit import product_config_dir

__all__ = [
    "CONFIG_DIR_ENV",
    "DEFAULT_CONFIG_DIR",
    "EPHEMERAL_STORE_ARGS",
    "LOGIN_FILE",
    "LOGIN_KEY_ENV",
    "AuthPlan",
    "codex_home",
    "login_stamp",
    "plan_auth",
]

CONFIG_DIR_ENV = "CODEX_HOME"
DEFAULT_CONFIG_DIR = ".codex"
LOGIN_FILE = "auth.json"
LOGIN_KEY_ENV = ("CODEX_API_KEY", "OPENAI_API_KEY")
"""The variables whose value may be logged in, in this order (``codex exec``'s own preference)."""
EPHEMERAL_STORE_ARGS = ("-c", 'cli_auth_credentials_store="ephemeral"')
"""Keeps a login made over the protocol in the process's memory (no ``auth.json`` written)."""

Stamp = tuple[int, int, int] | None


def codex_home(env: Mapping[str, str | None], environ: Mapping[str, str] | None = None) -> Path:
    """The ``CODEX_HOME`` a process with the overlay ``env`` uses (``$HOME/.codex`` by default)."""
    ambient: Mapping[str, str] = os.environ if environ is None else environ
    return product_config_dir(CONFIG_DIR_ENV, DEFAULT_CONFIG_DIR, env, ambient)


def login_stamp(home: Path) -> Stamp:
    """What identifies the login file's content now: ``(inode, size, mtime)``, or None if absent.

    A warm process caches its credentials for its life, so a changed stamp retires it.
    """
    try:
        stat = (home / LOGIN_FILE).stat()
    except OSError:
        return None
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)


@dataclass(frozen=True)
class AuthPlan:
    """What one spawn does about credentials (``key`` never appears in ``repr``)."""

    home: Path
    stamp: Stamp
    key_env: str | None = None
    """The forwarded variable whose value ``account/login/start`` logs in, if any."""

    @property
    def extra_args(self) -> tuple[str, ...]:
        return EPHEMERAL_STORE_ARGS if self.key_env is not None else ()

    def key(self, env: Mapping[str, str | None]) -> str | None:
        return env.get(self.key_env) if self.key_env is not None else None


def plan_auth(env: Mapping[str, str | None], environ: Mapping[str, str] | None = None) -> AuthPlan:
    """The plan for a process spawned with the overlay ``env`` (the forwarded values included)."""
    home = codex_home(env, environ)
    stamp = login_stamp(home)
    if stamp is not None:
        return AuthPlan(home, stamp)
    key_env = next((name for name in LOGIN_KEY_ENV if env.get(name)), None)
    return AuthPlan(home, stamp, key_env)
