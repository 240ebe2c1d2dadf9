"""Real Claude Code diagnostics: exits after a result, and prompt text no product can read."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent import ProductFailure, StopReason
from dsh.subagent_claude_code import ClaudeCodeProvider, ClaudeCodeProviderConfig, ClaudeCodeRun
from dsh.subagent_claude_code.testing import FakeMessagesServer, hermetic_env

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(120)]


async def test_a_kill_after_a_success_result_is_not_labelled_as_no_result(
    server: FakeMessagesServer,
    make_provider: Any,
    make_request: Any,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The CLI is killed from outside the moment its success result reaches the run, before it
    # can exit by itself. A result did arrive, so the stream's end fails validation (query-run),
    # keeping the observed signal; it is not process-exit, which means "before any result".
    original = ClaudeCodeRun._arm_dispose

    def kill_on_result(self: ClaudeCodeRun) -> None:
        process = self._transport.process
        assert process is not None
        os.kill(process.pid, signal.SIGKILL)
        original(self)

    monkeypatch.setattr(ClaudeCodeRun, "_arm_dispose", kill_on_result)
    server.queue_text("an answer that arrived")
    run = await make_provider(stderr="discard").start(make_request("t", workspace))
    result = await run.result()
    await run.aclose()
    assert result.stop_reason == StopReason.ERROR
    assert result.output == ()
    assert result.diagnostic == (
        "Product subagent failure (product: Claude Code; stage: query-run; category: unknown; "
        "signal: SIGKILL)"
    )


async def test_a_lone_surrogate_prompt_is_rejected_before_spawning_like_codex(
    server: FakeMessagesServer,
    make_provider: Any,
    make_request: Any,
    workspace: Path,
    own_marked_processes: Any,
) -> None:
    # The real CLI would accept it (the SDK writes it as a JSON escape); Codex drops the request
    # that carries it. Both providers reject it in the shared pre-spawn check instead.
    with pytest.raises(ProductFailure) as info:
        await make_provider().start(make_request("caf\ud800", workspace))
    assert str(info.value) == (
        "subagent-claude-code: the one-shot task must be valid Unicode text"
        " (prompt[0] holds an unpaired surrogate)"
    )
    assert server.requests == []
    assert own_marked_processes() == []


@pytest.mark.parametrize("status", [401, 403])
async def test_a_rejected_key_settles_at_once_under_the_default_retry_settings(
    tmp_path: Path, make_request: Any, workspace: Path, status: int
) -> None:
    """No ``CLAUDE_CODE_MAX_RETRIES``: the CLI's own defaults, which do not retry a 401 or 403."""
    async with FakeMessagesServer() as server:
        server.queue_http_error(status, "invalid x-api-key")
        env = hermetic_env(tmp_path / "homes", server.base_url)
        del env["CLAUDE_CODE_MAX_RETRIES"]
        provider = ClaudeCodeProvider(ClaudeCodeProviderConfig(env=env))
        run = await provider.start(make_request("t", workspace))
        began = time.monotonic()
        async with run:
            result = await run.result()
        settled = time.monotonic() - began
        requests = server.requests
    assert result.stop_reason == StopReason.ERROR
    assert f"category: authentication; HTTP status: {status}" in (result.diagnostic or ""), result
    assert settled < 2.0, f"settled {settled:.2f} s after start"
    assert len(requests) == 1
