"""Rate limits on the real products, under each product's DEFAULT retry settings (issue 39).

The loopback servers send the headers the real endpoints send, named as the products' own code
reads them (docs/usage-facts.md, "Rate limits"). Measured at the pinned versions:

- Codex 0.163.0 reads ``x-codex-{primary,secondary}-{used-percent,window-minutes,reset-at}``
  on every model response, API-key sessions included, and reports them as
  ``account/rateLimits/updated``; on HTTP 429 it retries only when ``Retry-After`` is sent
  (5 retries, each after the stated delay), and a ``usage_limit_reached`` body is not retried.
- Claude Code (bundled CLI) sends no ``rate_limit_event`` for an API-key session, even with
  the ``anthropic-ratelimit-unified-*`` headers, and none on a 429 either; on HTTP 429 it
  backs off exponentially (0.6, 1.1, 2.2, 4.0, 9.5, 17, then 33 to 37 s) and fails by itself
  after 11 requests (175 s), so a caller's limit settles it first.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.subagent_codex.testing import FakeResponsesServer, HttpStatus, MessageItem, Reply
from dsh.tool_subagent import Caller, Harness, ToolResult
from dsh.tool_subagent._cli import main
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


#: The tools of every profile here: the defaults, a 3 s wall clock, a 3 s stall limit.
TOOLS = {
    "delegate": "",
    "delegate_timeout": "timeout_s = 3",
    "delegate_stall": "stall_timeout_s = 3",
}


def _codex_env(home: Path, base_url: str) -> dict[str, str]:
    """The built-in ``openai`` provider on loopback with an API key and its default retries."""
    home.mkdir(parents=True)
    config = f'model = "gpt-5"\nopenai_base_url = {json.dumps(base_url)}\n'
    (home / "config.toml").write_text(config + "[features]\nplugins = false\n", encoding="utf-8")
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


@dataclass
class Rig:
    """A profile file with one provider and the ``TOOLS``, and a workspace."""

    profile: Path
    workspace: Path

    @classmethod
    def make(cls, tmp_path: Path, kind: str, base_url: str) -> Rig:
        make_env = _codex_env if kind == "codex" else _claude_env
        env = make_env(tmp_path / "home", base_url)
        inline = "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }"
        rows = ["[[provider]]", f'kind = "{kind}"', "[provider.config]", 'stderr = "discard"']
        rows += [f"env = {inline}", ""]
        for name, limit in TOOLS.items():
            rows += ["[[tool]]", f'provider = "{kind}"', f'tool_name = "{name}"', limit, ""]
        profile = tmp_path / "profile.toml"
        profile.write_text("\n".join(rows), encoding="utf-8")
        workspace = tmp_path / "ws"
        workspace.mkdir()
        return cls(profile, workspace)

    async def call(self, tool: str = "delegate") -> tuple[ToolResult, float]:
        async with Harness.from_profile(self.profile) as harness:
            began = time.monotonic()
            result = await harness.tool(tool).call(
                {"description": "limits", "prompt": "hello"}, Caller("limits", str(self.workspace))
            )
            elapsed = time.monotonic() - began
        assert await asyncio.to_thread(owned_marked_processes, None) == []
        return result, elapsed


def _host_side_only(result: ToolResult, *numbers: str) -> None:
    for number in numbers:
        assert number not in result.text, "a rate-limit fact reached the model-visible text"
        assert number not in json.dumps(result.value, default=str)


def _rate_facts(usage: dict[str, Any]) -> dict[str, Any]:
    return {key: usage[key] for key in RATE_FIELDS}


#: What Codex reports for ``CODEX_HEADERS``: the window nearer its limit, the percentage as a
#: whole number (42.5 arrives as 43).
CODEX_FACTS = {
    "rate_limit_used_percent": 43.0,
    "rate_limit_window_minutes": 300,
    "rate_limit_resets_at": 1900000000,
}


async def test_codex_rate_limit_headers_are_host_side_facts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with FakeResponsesServer(default=Reply((MessageItem("done", "final_answer"),))) as server:
        server.headers.update(CODEX_HEADERS)
        rig = Rig.make(tmp_path, "codex", server.base_url)
        result, _ = await rig.call()
        assert result.text == "done"
        assert result.meta is not None
        assert _rate_facts(result.meta["usage"]) == CODEX_FACTS
        _host_side_only(result, "1900000000", "10080")

        # A Job: the snapshot and job_output's meta carry the same facts.
        caller = Caller("limits", str(rig.workspace))
        async with Harness.from_profile(rig.profile) as harness:
            started = await harness.tool("delegate").call(
                {"description": "job", "prompt": "hi", "run_in_background": True}, caller
            )
            assert started.value is not None
            job_id = str(started.value["job_id"])
            read = await harness.tool("job_output").call(
                {"job_id": job_id, "wait": True, "timeout_ms": 60000}, caller
            )
            snapshot = harness.jobs.get(job_id, caller)
        assert "[status: completed" in read.text, read.text
        assert snapshot.meta is not None
        assert _rate_facts(snapshot.meta["usage"]) == CODEX_FACTS
        assert read.meta is not None
        assert _rate_facts(read.meta["usage"]) == CODEX_FACTS

        # ``dsh run --json``, in a thread (the loopback model serves on this loop).
        argv = ["run", "--profile", str(rig.profile), "--cwd", str(rig.workspace)]
        code = await asyncio.to_thread(main, [*argv, "--tool", "delegate", "--json", "hi"])
        report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    assert _rate_facts(report["usage"]) == CODEX_FACTS
    assert "1900000000" not in report["text"]


async def test_codex_usage_limit_keeps_its_category_and_gains_the_reset(tmp_path: Path) -> None:
    async with FakeResponsesServer(default=HttpStatus(429, USAGE_BODY)) as server:
        server.headers.update(CODEX_HEADERS, **{"x-codex-primary-used-percent": "100"})
        result, elapsed = await Rig.make(tmp_path, "codex", server.base_url).call()
        requests = len(server.requests)
    assert result.is_error
    assert "category: usageLimitExceeded" in result.text
    assert requests == 1, "a usage limit is not retried"
    assert elapsed < 10, elapsed
    assert result.meta is not None
    assert _rate_facts(result.meta["usage"]) == dict(CODEX_FACTS, rate_limit_used_percent=100.0)
    _host_side_only(result, "1900000000")


@pytest.mark.parametrize(("retry_after", "requests"), [(None, 1), ("1", 6)])
async def test_codex_429_under_default_retries(
    tmp_path: Path, retry_after: str | None, requests: int
) -> None:
    async with FakeResponsesServer(default=HttpStatus(429, RATE_BODY)) as server:
        if retry_after is not None:
            server.headers["retry-after"] = retry_after
        result, elapsed = await Rig.make(tmp_path, "codex", server.base_url).call()
        seen = len(server.requests)
    assert result.is_error
    assert "category: responseTooManyFailedAttempts; HTTP status: 429" in result.text
    # Measured: no retry without Retry-After; with it, 5 retries each after the stated delay.
    assert seen == requests
    assert elapsed < 2 + 1.2 * (requests - 1), elapsed


async def test_codex_429_storm_is_bounded_by_the_callers_timeout(tmp_path: Path) -> None:
    async with FakeResponsesServer(default=HttpStatus(429, RATE_BODY)) as server:
        server.headers["retry-after"] = "30"  # 5 retries: 150 s if left alone
        rig = Rig.make(tmp_path, "codex", server.base_url)
        result, elapsed = await rig.call("delegate_timeout")
    assert result.text.startswith("subagent run stopped: wall-clock limit of 3 s reached")
    assert 3 <= elapsed < 8, elapsed


async def test_claude_code_sends_no_rate_limit_event_for_an_api_key(tmp_path: Path) -> None:
    with FakeMessagesServer() as server:
        server.headers.update(CLAUDE_HEADERS)
        server.queue_text("done")
        result, _ = await Rig.make(tmp_path, "claude-code", server.base_url).call()
    assert result.text == "done"
    assert result.meta is not None
    usage = result.meta["usage"]
    assert usage["output_tokens"] > 0
    # The CLI got the headers but emits no rate_limit_event for an API-key session.
    assert not any(key.startswith("rate_limit_") for key in usage), usage


async def test_claude_code_429_storm_is_bounded_by_the_stall_limit(tmp_path: Path) -> None:
    with FakeMessagesServer() as server:
        server.headers.update({"x-should-retry": "true", "retry-after": "1"})
        for _ in range(20):
            server.queue_http_error(429, "rate limited")
        rig = Rig.make(tmp_path, "claude-code", server.base_url)
        result, elapsed = await rig.call("delegate_stall")
        seen = len(server.requests)
    # Retry notices are not activity: the stall limit fires although the CLI keeps retrying.
    assert result.text.startswith("subagent run stopped: no product activity for 3 s")
    assert 3 <= elapsed < 8, elapsed
    assert seen >= 2, "the CLI retried under its default settings"


async def test_claude_code_429_on_an_api_key_keeps_its_category_and_no_reset(
    tmp_path: Path,
) -> None:
    rejected = dict(CLAUDE_HEADERS)
    rejected["anthropic-ratelimit-unified-status"] = "rejected"
    rejected["anthropic-ratelimit-unified-5h-status"] = "rejected"
    rejected["anthropic-ratelimit-unified-5h-utilization"] = "1.0"
    with FakeMessagesServer() as server:
        server.headers.update(rejected)  # and ``x-should-retry: false``: one request
        server.queue_http_error(429, "rate limited")
        result, _ = await Rig.make(tmp_path, "claude-code", server.base_url).call()
    assert result.is_error
    assert "category: rate-limit; HTTP status: 429" in result.text
    assert result.meta is not None
    # Neither a rate_limit_event nor the result's rate-limit record comes for an API key.
    assert not any(key.startswith("rate_limit_") for key in result.meta["usage"])
