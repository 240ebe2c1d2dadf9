"""Real-Codex diagnostics: start-up exits keep their stage, partial output, bad prompt text."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest

from dsh.subagent import ProductFailure, StopReason, TextBlock
from dsh.subagent_codex import _handshake as handshake_module
from dsh.subagent_codex._run import CodexRun
from dsh.subagent_codex.testing import FunctionCallItem, HttpStatus, MessageItem, Reply
from dsh.subprocess import marked_processes

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(120)]
Env = Any
LONE_SURROGATE = "caf\ud800"


def _line(stage: str, category: str, extra: str = "") -> str:
    return f"Product subagent failure (product: Codex; stage: {stage}; category: {category}{extra})"


@pytest.mark.parametrize("step", ["initialize", "thread/start"])
async def test_an_exit_during_start_up_keeps_the_start_up_stage(
    codex_env: Env, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    # The real app-server is killed just before the request of ``step`` is sent: stdout ends
    # during the handshake, and the start fails with that step's stage and the observed signal.
    original = CodexRun._call

    async def kill_first(self: CodexRun, method: str, params: dict[str, Any]) -> Any:
        if method == step:
            os.kill(self._proc.pid, signal.SIGKILL)
        return await original(self, method, params)

    monkeypatch.setattr(CodexRun, "_call", kill_first)
    with pytest.raises(ProductFailure) as info:
        await codex_env.provider(stderr="discard").start(codex_env.request("t"))
    stage = "initialize" if step == "initialize" else "thread-start"
    assert str(info.value) == "subagent-codex: " + _line(stage, "process-exit", "; signal: SIGKILL")
    assert codex_env.server.requests == []


async def test_a_503_after_a_final_answer_keeps_the_answer_as_partial_output(
    codex_env: Env,
) -> None:
    # The first model response completes a final answer and asks for a command; the follow-up
    # request gets a 503, so the turn fails after the answer was already complete.
    codex_env.server.queue(
        Reply(
            (
                MessageItem("the answer so far", "final_answer"),
                FunctionCallItem("exec_command", {"cmd": "true"}),
            )
        ),
        HttpStatus(503, {"error": {"message": "unavailable"}}),
    )
    async with await codex_env.provider().start(codex_env.request("t")) as run:
        result = await run.result()
    assert result.stop_reason is StopReason.ERROR
    assert result.output == (TextBlock("the answer so far"),)
    assert result.diagnostic == _line("turn", "httpConnectionFailed", "; HTTP status: 503")
    assert len(codex_env.server.requests) == 2


async def test_a_lone_surrogate_prompt_is_rejected_before_spawning(codex_env: Env) -> None:
    with pytest.raises(ProductFailure) as info:
        await codex_env.provider().start(codex_env.request("ok ", LONE_SURROGATE))
    assert str(info.value) == (
        "subagent-codex: the one-shot task must be valid Unicode text"
        " (prompt[1] holds an unpaired surrogate)"
    )
    assert LONE_SURROGATE not in str(info.value)
    assert codex_env.server.all_requests == []
    assert await asyncio.to_thread(marked_processes, owner_pid=os.getpid()) == []


async def test_a_turn_start_the_product_drops_settles_instead_of_waiting_forever(
    codex_env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Past the pre-spawn check (called below it), the real Codex cannot deserialize a turn/start
    # with a lone surrogate, logs it and never answers. The bounded reply wait settles the run.
    monkeypatch.setattr(handshake_module, "_TURN_START_REPLY_S", 2.0)
    provider = codex_env.provider(stderr="discard")
    began = time.monotonic()
    cwd = str(codex_env.workspace)
    request = codex_env.request(LONE_SURROGATE)
    run = await provider._start_cold(cwd, *provider.launch(cwd, request), request)
    try:
        result = await asyncio.wait_for(run.result(), 20)
    finally:
        await run.aclose()
    assert time.monotonic() - began < 15
    assert result.stop_reason is StopReason.ERROR
    assert result.output == ()
    assert result.diagnostic == _line("turn-start", "unknown")
    assert codex_env.server.all_requests == []


async def test_a_kill_after_a_final_answer_keeps_the_answer_with_the_process_exit(
    codex_env: Env,
) -> None:
    command = {"cmd": "sleep 30", "login": False, "yield_time_ms": 20000}
    codex_env.server.queue(
        Reply(
            (
                MessageItem("answered before the kill", "final_answer"),
                FunctionCallItem("exec_command", command),
            )
        )
    )
    run = await codex_env.provider(stderr="discard").start(codex_env.request("t"))
    try:
        async with asyncio.timeout(30):
            # Poll until the final answer's item/completed has been read (bounded above).
            while run._final is None:  # noqa: ASYNC110 - test-side poll of private state
                await asyncio.sleep(0.05)
        os.kill(run._proc.pid, signal.SIGKILL)
        result = await asyncio.wait_for(run.result(), 20)
    finally:
        await run.aclose()
    assert result.stop_reason is StopReason.ERROR
    assert result.output == (TextBlock("answered before the kill"),)
    assert result.diagnostic == _line("process", "process-exit", "; signal: SIGKILL")
