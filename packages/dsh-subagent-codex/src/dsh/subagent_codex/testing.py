"""Loopback fixtures for keyless real-Codex runs (used by tests, ``dsh demo`` and benchmarks).

- ``FakeResponsesServer``: an OpenAI Responses API on 127.0.0.1, scripted like every dsh fake
  model server (``dsh.subagent.testing.ScriptedModelServer``).
- ``write_codex_home(dir, base_url, model)``: a hermetic ``CODEX_HOME/config.toml``.
- ``hermetic_env(home)``: the env overlay a provider needs to use that home.
- ``make_start_request(cwd, *texts)`` and ``provider_with_program(config, program)``: the test
  hooks both product providers' ``testing`` modules offer under the same names.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dsh.subagent_codex._config import CODEX_CREDENTIAL_ENV, CodexProviderConfig
from dsh.subagent_codex._fake_responses import (
    Behaviour,
    Drop,
    FakeResponsesServer,
    FunctionCallItem,
    HttpStatus,
    MessageItem,
    OutputItem,
    RecordedRequest,
    Reply,
    ResponseFailed,
    Stall,
    Trickle,
)
from dsh.subagent_codex._provider import CodexProvider
from dsh.subagent_codex._wire import MAX_LINE_BYTES

__all__ = [
    "FAKE_API_KEY",
    "FAKE_KEY_ENV",
    "SAMPLE_USAGE",
    "Behaviour",
    "Drop",
    "FakeResponsesServer",
    "FunctionCallItem",
    "HttpStatus",
    "MessageItem",
    "OutputItem",
    "RecordedRequest",
    "Reply",
    "ResponseFailed",
    "Stall",
    "Trickle",
    "hermetic_env",
    "make_start_request",
    "provider_with_program",
    "write_codex_home",
]

#: The variable the hermetic ``mock`` provider reads its bearer key from.
FAKE_KEY_ENV = "DSH_FAKE_OPENAI_KEY"
#: A non-empty fake key; it reaches the fake server as ``Authorization: Bearer <key>``.
FAKE_API_KEY = "sk-dsh-fake-key-0000"
#: A Responses API ``usage`` object for ``FakeResponsesServer.usage``: numbers chosen apart, so a
#: swapped or dropped field shows in a test that compares the run's usage facts with them.
SAMPLE_USAGE = {
    "input_tokens": 1000,
    "input_tokens_details": {"cached_tokens": 200},
    "output_tokens": 30,
    "output_tokens_details": {"reasoning_tokens": 7},
    "total_tokens": 1030,
}


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


def make_start_request(cwd: str | Path | None, *texts: str, provider: str = "codex") -> Any:
    """A ``ResolvedStartRequest`` for ``texts`` from a parent whose cwd is ``cwd``."""
    from dsh.subagent.testing import start_request

    return start_request(cwd, *texts, provider=provider)


def provider_with_program(
    config: CodexProviderConfig, program: Sequence[str], *, max_line_bytes: int = MAX_LINE_BYTES
) -> CodexProvider:
    """A provider that runs ``program app-server --listen stdio://`` instead of the pinned binary.

    For protocol branches the real app-server cannot be made to produce (scripted stand-ins);
    ``max_line_bytes`` lowers the stdout line bound. No config or profile can reach either.
    """
    return CodexProvider(config, _program=program, _max_line_bytes=max_line_bytes)
