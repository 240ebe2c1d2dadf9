"""Real Codex, the built-in ``openai`` provider: no credentials, an exported key, a rejected key.

The built-in provider is the product's default configuration; its base URL points at the
loopback server (``openai_base_url``), so nothing leaves the machine. These are the cases a
custom provider with ``env_key`` cannot prove: the app-server reads no key from its environment
for the built-in provider, and with no credentials its turn waits forever.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from dsh.subagent import ProductFailure, StopReason
from dsh.subagent_codex import CodexProvider, CodexProviderConfig
from dsh.subagent_codex.testing import (
    FakeResponsesServer,
    HttpStatus,
    make_start_request,
    write_codex_home,
)

pytestmark = pytest.mark.real_product

NO_AUTH_LINE = (
    "subagent-codex: Product subagent failure (product: Codex; stage: auth; category: unauthorized)"
)
KEY_CANARY = "sk-dsh-canary-7f3e9a1c"


def builtin_home(path: Path, base_url: str, *, extra: str = "") -> Path:
    """A fresh ``CODEX_HOME`` on the default provider, its base URL on loopback (no retries set)."""
    path.mkdir(parents=True, exist_ok=True)
    config = f'model = "gpt-5"\nopenai_base_url = {json.dumps(base_url)}\n{extra}'
    (path / "config.toml").write_text(config, encoding="utf-8")
    return path


def provider_for(home: Path, **env: str) -> CodexProvider:
    base = {
        "CODEX_HOME": str(home),
        "HOME": str(home),
        "OPENAI_API_KEY": "",
        "CODEX_API_KEY": "",
        "CODEX_APP_SERVER_DISABLE_MANAGED_CONFIG": "1",
        "RUST_LOG": "error",
    }
    return CodexProvider(CodexProviderConfig(env=base | env, dispose_grace_ms=2000))


def files_holding(root: Path, needle: str) -> list[str]:
    return [
        str(path.relative_to(root))
        for path in root.rglob("*")
        if path.is_file() and needle.encode() in path.read_bytes()
    ]


def _home_and_workspace(tmp_path: Path, fake: FakeResponsesServer) -> tuple[Path, Path]:
    """A Codex home on the built-in OpenAI provider pointed at ``fake``, and a workspace."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return builtin_home(tmp_path / "home", fake.base_url), workspace


async def test_no_credentials_fails_at_once_without_a_model_request(
    fake: FakeResponsesServer, tmp_path: Path
) -> None:
    home, workspace = _home_and_workspace(tmp_path, fake)
    began = time.monotonic()
    with pytest.raises(ProductFailure) as caught:
        await provider_for(home).start(make_start_request(workspace, "Summarise README.md."))
    elapsed = time.monotonic() - began
    assert str(caught.value) == NO_AUTH_LINE
    assert elapsed < 2.0, f"settled after {elapsed:.2f} s"
    assert fake.all_requests == [], "no model request (not even a WebSocket upgrade)"

    # The same home with a model provider that needs no OpenAI auth still completes.
    write_codex_home(home, fake.base_url, "mock-model", env_key=None)
    fake.queue_text("answered without OpenAI auth")
    async with await provider_for(home).start(make_start_request(workspace, "task")) as run:
        result = await run.result()
    assert result.stop_reason == StopReason.COMPLETED
    assert result.text == "answered without OpenAI auth"


@pytest.mark.parametrize("variable", ["OPENAI_API_KEY", "CODEX_API_KEY"])
async def test_an_exported_key_authenticates_and_is_written_nowhere(
    fake: FakeResponsesServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
) -> None:
    home, workspace = _home_and_workspace(tmp_path, fake)
    # Exported in the host's environment and forwarded by default (``credential_env``).
    monkeypatch.setenv(variable, KEY_CANARY)
    provider = provider_for(home)
    env = dict(provider.config.env)
    del env[variable]
    provider = CodexProvider(provider.config.model_copy(update={"env": env}))
    fake.queue_text("answered with the exported key")
    async with await provider.start(make_start_request(workspace, "task")) as run:
        result = await run.result()
    assert result.stop_reason == StopReason.COMPLETED, result.diagnostic
    assert result.text == "answered with the exported key"
    (request,) = fake.requests
    assert request.headers.get("authorization") == f"Bearer {KEY_CANARY}"
    assert not (home / "auth.json").exists()
    assert files_holding(home, KEY_CANARY) == [], "the user's CODEX_HOME holds no copy of the key"


async def test_a_login_file_wins_over_a_forwarded_key(
    fake: FakeResponsesServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``codex login`` made beforehand is used as the product would; the forwarded key is not."""
    home, workspace = _home_and_workspace(tmp_path, fake)
    login = {"OPENAI_API_KEY": "sk-dsh-from-login-file", "auth_mode": "apikey"}
    (home / "auth.json").write_text(json.dumps(login), encoding="utf-8")
    (home / "auth.json").chmod(0o600)
    fake.queue_text("answered with the login file")
    provider = provider_for(home, OPENAI_API_KEY=KEY_CANARY)
    async with await provider.start(make_start_request(workspace, "task")) as run:
        result = await run.result()
    assert result.stop_reason == StopReason.COMPLETED, result.diagnostic
    (request,) = fake.requests
    assert request.headers.get("authorization") == "Bearer sk-dsh-from-login-file"
    assert files_holding(home, KEY_CANARY) == []


@pytest.mark.parametrize("provider_kind", ["builtin", "custom"])
async def test_a_rejected_key_settles_at_the_first_401(tmp_path: Path, provider_kind: str) -> None:
    """Codex's default retry settings retry a 401 for about 6.5 s; the run settles at the first."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with FakeResponsesServer(default=HttpStatus(401), websocket_status=401) as server:
        if provider_kind == "builtin":
            home = builtin_home(tmp_path / "home", server.base_url)
        else:
            home = tmp_path / "home"
            home.mkdir()
            # A custom provider with no retry settings: the product's defaults apply.
            config = (
                'model = "mock-model"\nmodel_provider = "mock"\n[model_providers.mock]\n'
                f'name = "mock"\nbase_url = {json.dumps(server.base_url)}\n'
                'wire_api = "responses"\nenv_key = "DSH_TEST_MOCK_KEY"\n'
            )
            (home / "config.toml").write_text(config, encoding="utf-8")
        provider = provider_for(home, OPENAI_API_KEY=KEY_CANARY, DSH_TEST_MOCK_KEY=KEY_CANARY)
        run = await provider.start(make_start_request(workspace, "task"))
        began = time.monotonic()
        async with run:
            async with asyncio.timeout(10):
                result = await run.result()
        settled = time.monotonic() - began
        requests = server.all_requests
    assert result.stop_reason == StopReason.ERROR
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn; category: unauthorized;"
        " HTTP status: 401)"
    )
    assert settled < 2.0, f"settled {settled:.2f} s after the turn started"
    # The default loop makes 6; the first retry notice (after at most two silent request-level
    # attempts) ends it.
    assert 1 <= len(requests) <= 3, f"{len(requests)} requests: Codex's retry loop ran on"


async def test_a_warm_process_is_retired_when_the_login_file_changes(
    fake: FakeResponsesServer, tmp_path: Path
) -> None:
    """A warm process caches its credentials; a ``codex login`` made since must win."""
    home, workspace = _home_and_workspace(tmp_path, fake)
    provider = CodexProvider(
        provider_for(home, OPENAI_API_KEY=KEY_CANARY).config.model_copy(update={"prewarm": 1})
    )
    try:
        fake.queue_text("first")
        async with await provider.start(make_start_request(workspace, "first")) as run:
            assert (await run.result()).text == "first"
        pool = provider.warm_pool
        for _ in range(600):  # at most 30 s for the replacement warm process
            if pool.idle():
                break
            await asyncio.sleep(0.05)
        (stale,) = pool.idle()
        login = {"OPENAI_API_KEY": "sk-dsh-logged-in-later", "auth_mode": "apikey"}
        (home / "auth.json").write_text(json.dumps(login), encoding="utf-8")
        fake.queue_text("second")
        async with await provider.start(make_start_request(workspace, "second")) as run:
            assert run.process.pid != stale.process.pid, "the stale warm process was used"
            assert (await run.result()).text == "second"
        assert [r.headers.get("authorization") for r in fake.requests] == [
            f"Bearer {KEY_CANARY}",
            "Bearer sk-dsh-logged-in-later",
        ]
    finally:
        await provider.aclose()
