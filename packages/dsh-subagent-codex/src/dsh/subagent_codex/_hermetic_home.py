"""The hermetic ``CODEX_HOME`` a keyless Codex run uses: its ``config.toml``, pointing Codex at a
loopback model server, and the env overlay that selects it. Shared by ``dsh demo`` (``_demo``)
and the test hooks (``testing``, which re-exports these names).
"""

from __future__ import annotations

import json
from pathlib import Path

from dsh.subagent_codex.config import CODEX_CREDENTIAL_ENV

__all__ = ["FAKE_API_KEY", "FAKE_KEY_ENV", "hermetic_env", "write_codex_home"]

#: The variable the hermetic ``mock`` provider reads its bearer key from.
FAKE_KEY_ENV = "DSH_FAKE_OPENAI_KEY"
#: A non-empty fake key; it reaches the fake server as ``Authorization: Bearer <key>``.
FAKE_API_KEY = "sk-dsh-fake-key-0000"


def _toml(value: str) -> str:
    # A JSON string is a valid TOML basic string for the characters we write.
    return json.dumps(value)


def write_codex_home(
    dir: str | Path,
    base_url: str,
    model: str,
    *,
    approval_policy: str | None = None,
    stream_idle_timeout_ms: int = 10_000,
    env_key: str | None = FAKE_KEY_ENV,
) -> Path:
    """Create ``dir`` (if needed) and write a hermetic ``config.toml`` into it; return ``dir``.

    The ``mock`` provider uses ``wire_api = "responses"`` with every retry loop off, plugins off
    (no git or HTTPS at start-up) and ``unbounded_connection_retries = false`` so a dead server
    fails the turn instead of hanging it. ``approval_policy`` adds an ambient top-level policy
    (tests use it to prove that the thread-level mode overrides it).
    """
    home = Path(dir)
    home.mkdir(parents=True, exist_ok=True)
    lines = [f"model = {_toml(model)}", 'model_provider = "mock"']
    if approval_policy is not None:
        lines.append(f"approval_policy = {_toml(approval_policy)}")
    lines += [
        "",
        "[features]",
        "plugins = false",
        "unbounded_connection_retries = false",
        "",
        "[model_providers.mock]",
        'name = "mock"',
        f"base_url = {_toml(base_url)}",
        'wire_api = "responses"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
        f"stream_idle_timeout_ms = {int(stream_idle_timeout_ms)}",
    ]
    if env_key is not None:
        lines.append(f"env_key = {_toml(env_key)}")
    (home / "config.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return home


def hermetic_env(
    home: str | Path, *, api_key: str | None = FAKE_API_KEY, key_env: str = FAKE_KEY_ENV
) -> dict[str, str]:
    """The env overlay (``CodexProviderConfig.env``) for a home written by ``write_codex_home``.

    ``HOME`` points at the same temporary home: before its first command Codex snapshots the
    user's login shell (``bash -lc`` sourcing ``$HOME/.bashrc``), and a keyless run must not run
    the host user's shell start-up files (a host ``.bashrc`` with ``pyenv init`` made every
    command turn wait on pyenv's rehash lock, for up to 60 s when a lock was left behind).

    Codex's own credential names (``CODEX_CREDENTIAL_ENV``, forwarded by default) are set to
    empty values, which win over the ambient ones: a test never picks up the developer's real
    key. Codex treats an empty key as no key.
    """
    env: dict[str, str] = dict.fromkeys(CODEX_CREDENTIAL_ENV, "")
    env |= {
        "CODEX_HOME": str(Path(home)),
        "HOME": str(Path(home)),
        "CODEX_APP_SERVER_DISABLE_MANAGED_CONFIG": "1",
        "RUST_LOG": "error",
    }
    if api_key is not None:
        env[key_env] = api_key
    return env
