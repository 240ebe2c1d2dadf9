"""The keyed tier's Responses→Chat-Completions bridge, proven keylessly (mandatory, never skipped).

Real Codex → bridge (127.0.0.1) → fake Chat Completions server (127.0.0.1) → back. The same
bridge carries Codex to DeepSeek in ``test_deepseek_keyed.py``; here the upstream is our fake, so
everything stays on loopback.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent import StopReason
from dsh.subagent.testing import result_of
from dsh.subagent_codex import CodexProvider, CodexProviderConfig
from dsh.subagent_codex.testing import hermetic_env, make_start_request, write_codex_home

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(120)]

MODEL = "bridge-test-model"
FilesContaining = Callable[[Path, str], Awaitable[list[str]]]


def _codex(tmp_path: Path, base_url: str, key: str) -> tuple[CodexProvider, Path]:
    home = write_codex_home(tmp_path / "codex-home", base_url, MODEL)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    config = CodexProviderConfig(
        provider_name="codex-bridge",
        model=MODEL,
        env=hermetic_env(home, api_key=key),
        dispose_grace_ms=2000,
    )
    return CodexProvider(config), workspace


@pytest.mark.parametrize("upstream_stream", [True, False], ids=["stream", "no-stream"])
async def test_codex_answers_byte_exact_through_the_bridge(
    upstream_stream: bool,
    tmp_path: Path,
    fake_chat: Any,
    make_bridge: Any,
    files_containing: FilesContaining,
) -> None:
    nonce = f"nonce-{secrets.token_hex(8)}"
    key = f"sk-bridge-{secrets.token_hex(12)}"
    task = f"Reply with exactly: {nonce}"
    # Multibyte characters split across deltas, inner and trailing spaces: kept byte-exact.
    answer = f"{nonce} — “exact” ✓  two  spaces"
    fake_chat.queue_text(answer, piece=3)
    bridge = await make_bridge(fake_chat.base_url, upstream_stream=upstream_stream)
    provider, workspace = _codex(tmp_path, bridge.base_url, key)

    async with asyncio.timeout(60):
        async with await provider.start(make_start_request(workspace, task)) as run:
            result = await run.result()

    assert result.stop_reason is StopReason.COMPLETED, result.diagnostic
    assert result.text == answer
    assert result.diagnostic is None
    # The bridge got Codex's Responses request ...
    (responses,) = bridge.requests
    assert responses.method == "POST"
    assert responses.path == "/v1/responses"
    assert responses.json["stream"] is True
    assert responses.json["input"][-1]["content"][0]["text"] == task
    # ... and the fake got the translated Chat Completions request, credential included.
    (chat,) = fake_chat.requests
    assert chat.method == "POST"
    assert chat.path == "/chat/completions"
    assert chat.headers["authorization"] == f"Bearer {key}"
    assert chat.json["model"] == MODEL
    assert chat.json["stream"] is upstream_stream
    messages = chat.json["messages"]
    assert messages[0]["role"] == "system"
    assert "Codex" in messages[0]["content"]  # Codex's own base prompt, from a developer item
    assert messages[-1] == {"role": "user", "content": task}
    assert {m["role"] for m in messages} <= {"system", "user", "assistant"}
    assert "tools" not in chat.json
    # Hermetic: the credential lives only in the child env, never in a file under the homes.
    assert await files_containing(tmp_path, key) == []
    # Positive control: the scan does find the key once a file holds it.
    (tmp_path / "codex-home" / "control.txt").write_text(f"x{key}x", encoding="utf-8")
    assert await files_containing(tmp_path, key) == ["codex-home/control.txt"]


async def _failure_line(tmp_path: Path, base_url: str, key: str, answer: str) -> str:
    """The first line of the diagnostic of a Codex run through the bridge that must fail: no
    output, an error."""
    provider, workspace = _codex(tmp_path, base_url, key)
    async with asyncio.timeout(60):
        request = make_start_request(workspace, f"Reply with: {answer}")
        result = await result_of(provider, request)
    assert result.stop_reason is StopReason.ERROR
    assert result.output == ()
    assert result.diagnostic is not None
    return result.diagnostic.splitlines()[0]


async def test_upstream_status_reaches_codex_as_its_safe_category(
    tmp_path: Path, fake_chat: Any, make_bridge: Any
) -> None:
    fake_chat.queue_status(401)
    bridge = await make_bridge(fake_chat.base_url)
    first = await _failure_line(tmp_path, bridge.base_url, "sk-bridge-rejected", "x")
    assert first.startswith(
        "Product subagent failure (product: Codex; stage: turn; "
        "category: unauthorized; HTTP status: 401"
    )
    assert len(bridge.requests) == 1
    assert len(fake_chat.requests) == 1


async def test_a_cut_upstream_stream_never_passes_for_an_answer(
    tmp_path: Path, fake_chat: Any, make_bridge: Any
) -> None:
    fake_chat.queue_drop("partial answer that must not")
    bridge = await make_bridge(fake_chat.base_url)
    first = await _failure_line(tmp_path, bridge.base_url, "sk-bridge-cut", "y")
    assert first.startswith(
        "Product subagent failure (product: Codex; stage: turn; category: other"
    )
    assert len(fake_chat.requests) == 1


async def test_bridge_refuses_a_remote_upstream_unless_allowed(make_bridge: Any) -> None:
    # Construction fails before any socket exists: only the keyed tier may reach DeepSeek.
    with pytest.raises(ValueError, match="allow_remote"):
        await make_bridge("https://api.deepseek.com")
