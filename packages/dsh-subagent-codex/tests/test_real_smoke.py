"""Keyless real-Codex tests: task, key and answer reach the right places (mandatory; never skip)."""

from __future__ import annotations

from typing import Any as Env

import pytest

from dsh.subagent import StopReason

pytestmark = pytest.mark.real_product


async def test_task_and_key_reach_the_server_and_answer_is_byte_exact(codex_env: Env) -> None:
    answer = "  Hello — ünïcode\n\tend  "
    codex_env.server.queue_text(answer, phase="final_answer")
    async with await codex_env.provider().start(codex_env.request("say hi ", "please")) as run:
        result = await run.result()
    assert result.stop_reason is StopReason.COMPLETED
    assert result.text == answer
    assert result.diagnostic is None
    (first,) = codex_env.server.requests
    assert first.headers["authorization"] == "Bearer sk-dsh-fake-key-0000"
    last = first.body["input"][-1]
    assert last["role"] == "user"
    assert last["content"] == [
        {"type": "input_text", "text": "say hi "},
        {"type": "input_text", "text": "please"},
    ]
    assert first.body["model"] == "mock-model"
