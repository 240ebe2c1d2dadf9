"""Rate limits on the real products, under each product's DEFAULT retry settings (issue 39).

The loopback servers send the headers the real endpoints send, named as the products' own code
reads them (docs/usage-facts.md, "Rate limits"). Measured at the pinned versions:

- Codex 0.163.0 reads ``x-codex-{primary,secondary}-{used-percent,window-minutes,reset-at}``
  on every model response, API-key sessions included, and reports them as
  ``account/rateLimits/updated``; on HTTP 429 it retries only when ``Retry-After`` is sent
  (5 retries, each after the stated delay), and a ``usage_limit_reached`` body is not retried.
- Claude Code (bundled CLI) sends no ``rate_limit_event`` for an API-key session, even with
  the ``anthropic-ratelimit-unified-*`` headers; on HTTP 429 it backs off exponentially
  (0.6, 1.2, 2.2, 4.5, 9.5, 18.6, then about 36 s), so a caller's limit settles it first.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.subagent_codex.testing import FakeResponsesServer, HttpStatus
from dsh.tool_subagent import Caller, Harness
from dsh.tool_subagent._demo.scenarios import owned_marked_processes

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(120)]

CODEX_HEADERS = {
    "x-codex-primary-used-percent": "42.5",
    "x-codex-primary-window-minutes": "300",
    "x-codex-primary-reset-at": "1900000000",
    "x-codex-secondary-used-percent": "12",
    "x-codex-secondary-window-minutes": "10080",
    "x-codex-secondary-reset-at": "1900500000",
}
CLAUDE_HEADERS = {
    "anthropic-ratelimit-unified-status": "allowed_warning",
    "anthropic-ratelimit-unified-reset": "1900000000",
    "anthropic-ratelimit-unified-5h-status": "allowed_warning",
    "anthropic-ratelimit-unified-5h-reset": "1900000000",
    "anthropic-ratelimit-unified-5h-utilization": "0.91",
    "anthropic-ratelimit-unified-7d-status": "allowed",
    "anthropic-ratelimit-unified-7d-reset": "1900500000",
    "anthropic-ratelimit-unified-7d-utilization": "0.2",
    "anthropic-ratelimit-unified-representative-claim": "five_hour",
}
RATE_BODY = {
    "error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}
}
USAGE_BODY = {
    "error": {
        "type": "usage_limit_reached",
        "message": "The usage limit has been reached",
        "resets_in_seconds": 3600,
    }
}
RATE_FIELDS = ("rate_limit_used_percent", "rate_limit_window_minutes", "rate_limit_resets_at")


def _codex_env(home: Path, base_url: str) -> dict[str, str]:
    """The built-in ``openai`` provider on loopback with an API key and its default retries."""
    home.mkdir(parents=True)
    config = (
        f'model = "gpt-5"\nopenai_base_url = {json.dumps(base_url)}\n[features]\nplugins = false\n'
    )
    (home / "config.toml").write_text(config, encoding="utf-8")
    return {
        "CODEX_HOME": str(home),
        "HOME": str(home),
        "OPENAI_API_KEY": "sk-dsh-loopback-0000",
        "CODEX_API_KEY": "",
        "CODEX_APP_SERVER_DISABLE_MANAGED_CONFIG": "1",
        "RUST_LOG": "off",
    }


def _claude_env(home: Path, base_url: str) -> dict[str, str]:
    env = claude_env(home, base_url)
    del env["CLAUDE_CODE_MAX_RETRIES"]  # the CLI's default retries
    del env["API_TIMEOUT_MS"]
    env["ANTHROPIC_API_KEY"] = "sk-ant-loopback"
    return env


async def _call(
    kind: str, env: dict[str, str], workspace: Path, **limits: Any
) -> tuple[Any, float]:
    profile = {
        "provider": [{"kind": kind, "config": {"stderr": "discard", "env": env}}],
        "tool": [{"provider": kind, "tool_name": "delegate", **limits}],
    }
    async with Harness.from_profile(profile) as harness:
        began = time.monotonic()
        result = await harness.tool("delegate").call(
            {"description": "limits", "prompt": "hello"}, Caller("limits", str(workspace))
        )
        elapsed = time.monotonic() - began
    assert await asyncio.to_thread(owned_marked_processes, None) == []
    return result, elapsed


def _no_digits_of(result: Any, *numbers: str) -> None:
    for number in numbers:
        assert number not in result.text, "a rate-limit fact reached the model-visible text"
        assert number not in json.dumps(result.value, default=str)


async def test_codex_rate_limit_headers_are_host_side_facts(tmp_path: Path) -> None:
    async with FakeResponsesServer() as server:
        server.headers.update(CODEX_HEADERS)
        server.queue_text("done", phase="final_answer")
        env = _codex_env(tmp_path / "home", server.base_url)
        result, _ = await _call("codex", env, tmp_path)
    assert result.text == "done"
    usage = result.meta["usage"]
    # The window nearer its limit; Codex states the percentage as a whole number (42.5 -> 43).
    assert {key: usage[key] for key in RATE_FIELDS} == {
        "rate_limit_used_percent": 43.0,
        "rate_limit_window_minutes": 300,
        "rate_limit_resets_at": 1900000000,
    }
    _no_digits_of(result, "1900000000", "10080")


async def test_codex_usage_limit_keeps_its_category_and_gains_the_reset(tmp_path: Path) -> None:
    headers = dict(CODEX_HEADERS, **{"x-codex-primary-used-percent": "100"})
    async with FakeResponsesServer(default=HttpStatus(429, USAGE_BODY)) as server:
        server.headers.update(headers)
        env = _codex_env(tmp_path / "home", server.base_url)
        result, elapsed = await _call("codex", env, tmp_path)
        requests = len(server.requests)
    assert result.is_error
    assert "category: usageLimitExceeded" in result.text
    assert requests == 1, "a usage limit is not retried"
    assert elapsed < 10, elapsed
    usage = result.meta["usage"]
    assert usage["rate_limit_used_percent"] == 100.0
    assert usage["rate_limit_resets_at"] == 1900000000
    _no_digits_of(result, "1900000000")


@pytest.mark.parametrize(("retry_after", "requests"), [(None, 1), ("1", 6)])
async def test_codex_429_under_default_retries(
    tmp_path: Path, retry_after: str | None, requests: int
) -> None:
    async with FakeResponsesServer(default=HttpStatus(429, RATE_BODY)) as server:
        if retry_after is not None:
            server.headers["retry-after"] = retry_after
        env = _codex_env(tmp_path / "home", server.base_url)
        result, elapsed = await _call("codex", env, tmp_path)
        seen = len(server.requests)
    assert result.is_error
    assert "category: responseTooManyFailedAttempts; HTTP status: 429" in result.text
    # Measured: no retry without Retry-After; with it, 5 retries each after the stated delay.
    assert seen == requests
    assert elapsed < 2 + 1.2 * (requests - 1), elapsed


async def test_codex_429_storm_is_bounded_by_the_callers_timeout(tmp_path: Path) -> None:
    async with FakeResponsesServer(default=HttpStatus(429, RATE_BODY)) as server:
        server.headers["retry-after"] = "30"  # 5 retries: 150 s if left alone
        env = _codex_env(tmp_path / "home", server.base_url)
        result, elapsed = await _call("codex", env, tmp_path, timeout_s=3)
    assert result.text.startswith("subagent run stopped: wall-clock limit of 3 s reached")
    assert 3 <= elapsed < 8, elapsed


async def test_claude_code_sends_no_rate_limit_event_for_an_api_key(tmp_path: Path) -> None:
    with FakeMessagesServer() as server:
        server.headers.update(CLAUDE_HEADERS)
        server.queue_text("done")
        env = _claude_env(tmp_path / "home", server.base_url)
        result, _ = await _call("claude-code", env, tmp_path)
    assert result.text == "done"
    usage = result.meta["usage"]
    assert usage["output_tokens"] > 0
    # The CLI read the headers but emits no rate_limit_event for an API-key session.
    assert not any(key.startswith("rate_limit_") for key in usage), usage


async def test_claude_code_429_storm_is_bounded_by_the_stall_limit(tmp_path: Path) -> None:
    with FakeMessagesServer() as server:
        server.headers.update({"x-should-retry": "true", "retry-after": "1"})
        for _ in range(20):
            server.queue_http_error(429, "rate limited")
        env = _claude_env(tmp_path / "home", server.base_url)
        result, elapsed = await _call("claude-code", env, tmp_path, stall_timeout_s=3)
        seen = len(server.requests)
    # Retry notices are not activity: the stall limit fires although the CLI keeps retrying.
    assert result.text.startswith("subagent run stopped: no product activity for 3 s")
    assert 3 <= elapsed < 8, elapsed
    assert seen >= 2, "the CLI retried under its default settings"
