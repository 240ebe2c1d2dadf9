"""A key the provider forwards to the product never reaches a tool command or the model.

Each product gets a canary credential by name (``inherit_env`` and the provider's default
credential names). A tool command prints its whole environment and the named variables; what
it printed goes back to the model in the next request. The canary must be absent from every
model request's body (prompts, tool outputs). Headers are excluded on purpose: a product may use
its own credential as its auth header, which is its legitimate use.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent import StopReason
from dsh.subagent_codex.testing import FunctionCallItem, MessageItem, Reply

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(120)]

SHOW = 'env; echo "seen=${OPENAI_API_KEY:-unset}/${CODEX_API_KEY:-unset}/${ANTHROPIC_API_KEY:-unset}"'


def _canary() -> str:
    return f"sk-CANARY-{uuid.uuid4().hex}"


async def test_codex_tool_never_sees_a_forwarded_key(
    codex: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, other = _canary(), _canary()
    monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.setenv("CODEX_API_KEY", other)
    monkeypatch.setenv("FORWARDED_EXTRA", key)
    call = {"cmd": SHOW, "login": False, "yield_time_ms": 10_000}
    codex.server.queue(Reply((FunctionCallItem("exec_command", call),)))
    codex.server.queue(Reply((MessageItem("done"),)))
    provider = codex.provider(inherit_env=("OPENAI_API_KEY", "FORWARDED_EXTRA"))
    async with await provider.start(codex.request("show env")) as run:
        result = await run.result()
    assert result.stop_reason is StopReason.COMPLETED, result.diagnostic
    bodies = [request.body for request in codex.server.model_requests]
    assert len(bodies) == 2
    tool_output = json.dumps(codex.server.model_requests[1].json)
    assert "seen=unset/unset/unset" in tool_output, re.findall(r"seen=[^\\]*", tool_output)
    assert "PATH=" in tool_output, "the tool did print its environment"
    for body in bodies:
        assert key.encode() not in body and other.encode() not in body


async def test_claude_code_tool_never_sees_a_forwarded_key(
    claude: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = _canary()
    monkeypatch.setenv("FORWARDED_EXTRA", key)
    claude.server.queue_tool_use("Bash", {"command": SHOW, "description": "show env"})
    claude.server.queue_text("done")
    provider = claude.provider(
        permission_mode="bypassPermissions",
        env={"IS_SANDBOX": "1", "ANTHROPIC_API_KEY": key},
        inherit_env=["FORWARDED_EXTRA"],
    )
    async with await provider.start(claude.request("show env")) as run:
        result = await run.result()
    assert result.stop_reason is StopReason.COMPLETED, result.diagnostic
    assert len(claude.server.requests) >= 2
    tool_output = json.dumps(claude.server.requests[-1].body)
    assert "seen=unset/unset/unset" in tool_output, re.findall(r"seen=[^\\]*", tool_output)
    assert "PATH=" in tool_output, "the tool did print its environment"
    for request in claude.server.requests:
        assert key.encode() not in request.raw_body
    assert any(r.headers.get("x-api-key") == key for r in claude.server.requests)
