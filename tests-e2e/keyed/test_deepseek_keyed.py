"""The keyed DeepSeek tier: both real products answer a random nonce through DeepSeek.

It skips itself, naming ``DEEPSEEK_API_KEY``, when that variable is unset or blank. It is the one
documented exception to the loopback-only network rule (see docs/deepseek.md):

- Claude Code reaches DeepSeek's Anthropic-compatible endpoint through ``ANTHROPIC_BASE_URL`` and
  ``ANTHROPIC_AUTH_TOKEN``, with the documented models ``deepseek-v4-pro[1m]`` (main) and
  ``deepseek-v4-flash`` (small/fast and subagent);
- Codex goes through the test-private loopback Responses→Chat-Completions bridge (conftest.py) to
  DeepSeek's Chat Completions API.

The key only ever lives in the ambient env and the child env (``inherit_env``): it is never a
config literal and never written to a file; each test asserts that no file under its temporary
homes contains it afterwards.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent import Descriptor, Parent, ResolvedStartRequest, StopReason, TextBlock
from dsh.subagent.testing import result_of
from dsh.subagent_claude_code import ClaudeCodeProvider, ClaudeCodeProviderConfig
from dsh.subagent_claude_code.testing import hermetic_env as claude_hermetic_env
from dsh.subagent_codex import CodexProvider, CodexProviderConfig
from dsh.subagent_codex.testing import hermetic_env as codex_hermetic_env
from dsh.subagent_codex.testing import make_start_request, write_codex_home

KEY_ENV = "DEEPSEEK_API_KEY"
if not os.environ.get(KEY_ENV, "").strip():
    pytest.skip(
        f"{KEY_ENV} is not set: the keyed DeepSeek tier needs a DeepSeek API key "
        "(see docs/deepseek.md)",
        allow_module_level=True,
    )

pytestmark = [pytest.mark.keyed, pytest.mark.real_product, pytest.mark.timeout(300)]

DEEPSEEK_ANTHROPIC_URL = "https://api.deepseek.com/anthropic"
DEEPSEEK_CHAT_URL = "https://api.deepseek.com"
MAIN_MODEL = "deepseek-v4-pro[1m]"
FAST_MODEL = "deepseek-v4-flash"
CODEX_MODEL = "deepseek-v4-pro"  # the Chat Completions id; ``[1m]`` is a Claude Code suffix
RUN_TIMEOUT_S = 240.0
FilesContaining = Callable[[Path, str], Awaitable[list[str]]]


def _task() -> tuple[str, str]:
    nonce = f"dsh-nonce-{secrets.token_hex(6)}"
    return nonce, f"Reply with exactly: {nonce}"


async def test_claude_code_answers_the_nonce_through_deepseek(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files_containing: FilesContaining
) -> None:
    key = os.environ[KEY_ENV].strip()
    # The CLI reads the bearer token from ANTHROPIC_AUTH_TOKEN; it reaches the child by name only.
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", key)
    env = claude_hermetic_env(
        tmp_path / "claude", DEEPSEEK_ANTHROPIC_URL, api_key="", api_timeout_ms=180_000
    )
    env.update(
        {
            "ANTHROPIC_MODEL": MAIN_MODEL,
            "ANTHROPIC_DEFAULT_OPUS_MODEL": MAIN_MODEL,
            "ANTHROPIC_DEFAULT_SONNET_MODEL": MAIN_MODEL,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": FAST_MODEL,
            "ANTHROPIC_SMALL_FAST_MODEL": FAST_MODEL,
            "CLAUDE_CODE_SUBAGENT_MODEL": FAST_MODEL,
            "CLAUDE_CODE_MAX_RETRIES": "2",
        }
    )
    provider = ClaudeCodeProvider(
        ClaudeCodeProviderConfig(
            provider_name="claude-code-deepseek",
            model=MAIN_MODEL,
            env=env,
            inherit_env=["ANTHROPIC_AUTH_TOKEN"],
        )
    )
    workspace = tmp_path / "ws"
    workspace.mkdir()
    nonce, task = _task()
    request = ResolvedStartRequest(
        prompt=(TextBlock(task),),
        parent=Parent(session_id="dsh-keyed", cwd=str(workspace)),
        descriptor=Descriptor(provider="claude-code-deepseek"),
    )

    async with asyncio.timeout(RUN_TIMEOUT_S):
        result = await result_of(provider, request)

    assert result.stop_reason is StopReason.COMPLETED, result.diagnostic
    assert result.text == nonce
    assert await files_containing(tmp_path, key) == []


async def test_codex_answers_the_nonce_through_the_bridge_to_deepseek(
    tmp_path: Path, make_bridge: Any, files_containing: FilesContaining
) -> None:
    key = os.environ[KEY_ENV].strip()
    bridge = await make_bridge(DEEPSEEK_CHAT_URL, allow_remote=True)
    # Codex reads the key from the variable named by env_key; config.toml holds only the name.
    home = write_codex_home(
        tmp_path / "codex-home",
        bridge.base_url,
        CODEX_MODEL,
        env_key=KEY_ENV,
        stream_idle_timeout_ms=180_000,
    )
    provider = CodexProvider(
        CodexProviderConfig(
            provider_name="codex-deepseek",
            model=CODEX_MODEL,
            env=codex_hermetic_env(home, api_key=None),
            inherit_env=(KEY_ENV,),
        )
    )
    workspace = tmp_path / "ws"
    workspace.mkdir()
    nonce, task = _task()

    async with asyncio.timeout(RUN_TIMEOUT_S):
        result = await result_of(
            provider, make_start_request(workspace, task, provider="codex-deepseek")
        )

    assert result.stop_reason is StopReason.COMPLETED, result.diagnostic
    assert result.text == nonce
    (request,) = bridge.requests
    assert request.json["input"][-1]["content"][0]["text"] == task
    assert request.headers.get("authorization", "").startswith("Bearer ")
    assert await files_containing(tmp_path, key) == []
