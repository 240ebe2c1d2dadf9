"""Flows through the delegation tool and the job tools with the REAL products (keyless).

A harness is built from an in-memory profile whose providers' ``env`` point at the loopback model
servers, with hermetic homes under ``tmp_path``. Every flow asserts exact model-visible text.
Processes are counted by their dsh tree marker, restricted to markers owned by this test process
(other dsh programs may run on the same machine).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from dsh.jobs import JobDone
from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.subagent_codex.testing import (
    FAKE_API_KEY,
    HttpStatus,
)
from dsh.tool_subagent import Caller, ToolResult
from dsh.tool_subagent._demo.scenarios import owned_marked_processes

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(120)]

CODEX, CLAUDE = "codex", "claude-code"
TOOLS = {CODEX: "subagent_codex", CLAUDE: "subagent_claude_code"}
CLAUDE_KEY = "sk-ant-flows-fake-key"
FAILURES = {
    CODEX: "Product subagent failure (product: Codex; stage: turn; category: "
    "httpConnectionFailed; HTTP status: 503)",
    CLAUDE: "Product subagent failure (product: Claude Code; stage: query-run; category: "
    "authentication; HTTP status: 401; exit code: 1)",
}
SECRET_BODY = "flows-secret-error-body-3f9a"


def started_id(started: ToolResult) -> str:
    """The id a background start returned (random: ``subagent-<12 hex>``); the text names it
    and the value carries it."""
    match = re.fullmatch(r"started background subagent job (subagent-[0-9a-f]{12})", started.text)
    assert match is not None, started.text
    job_id = match.group(1)
    assert started == ToolResult(
        text=f"started background subagent job {job_id}", value={"job_id": job_id}
    )
    return job_id


def _fail(stack: Any, product: str) -> None:
    if product == CODEX:
        stack.codex.queue(HttpStatus(503, {"error": {"message": SECRET_BODY}}))
    else:
        stack.claude.queue_http_error(401, SECRET_BODY)


@pytest.fixture
async def stack(loopback: Any) -> AsyncIterator[Any]:
    env = claude_env(loopback.root / "claude", loopback.claude.base_url, api_key=CLAUDE_KEY)
    # An owner of its own: job records outlive the harness in the session's job store, and
    # job_list shows every record of its owner.
    caller = Caller(f"flows-session-{uuid.uuid4().hex}", str(loopback.workspace))
    async with loopback.session(loopback.profile(claude={"env": env}), caller) as session:
        yield session


async def _owned() -> list[int]:
    return await asyncio.to_thread(owned_marked_processes)


async def _wait_for(predicate: Callable[[], bool], limit: float = 15.0) -> None:
    async with asyncio.timeout(limit):
        while not await asyncio.to_thread(predicate):  # noqa: ASYNC110 - bounded test-side poll
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("product", [CODEX, CLAUDE])
async def test_foreground_answer_is_byte_exact(stack: Any, product: str) -> None:
    answer = f"foreground answer from {product}  “exact” ✓"
    stack.answer(product, answer)
    result = await stack.delegate(product, "Reply with the foreground answer FLOW-FG.")
    assert result == ToolResult(
        text=answer, is_error=False, value={"stop_reason": "completed", "diagnostic": None}
    )
    assert stack.tasks(product) == ["Reply with the foreground answer FLOW-FG."]
    if product == CODEX:
        assert stack.codex.requests[0].headers["authorization"] == f"Bearer {FAKE_API_KEY}"
    else:
        assert stack.claude.requests[0].headers["x-api-key"] == CLAUDE_KEY
    assert await _owned() == []


@pytest.mark.parametrize("product", [CODEX, CLAUDE])
async def test_background_job_is_collected_with_job_output_wait(stack: Any, product: str) -> None:
    answer = f"background answer from {product}"
    stack.answer(product, answer)
    started = await stack.delegate(
        product, "Finish FLOW-BG in the background.", run_in_background=True
    )
    job_id = started_id(started)
    read = await stack.call("job_output", job_id=job_id, wait=True, timeout_ms=60000)
    assert read.text == f"{answer}\n[status: completed]"
    assert not read.is_error
    listed = await stack.call("job_list")
    assert listed.text == f"{job_id} [subagent] completed — flow task"
    assert stack.tasks(product) == ["Finish FLOW-BG in the background."]
    assert await _owned() == []


async def test_unread_background_job_sends_its_completion_notice(stack: Any) -> None:
    done: list[JobDone] = []
    settled = asyncio.Event()

    def listener(event: JobDone) -> None:
        done.append(event)
        settled.set()

    unsubscribe = stack.harness.jobs.on_job_done(listener)
    try:
        stack.answer(CODEX, "noticed answer")
        started = await stack.delegate(CODEX, "FLOW-NOTICE", run_in_background=True)
        job_id = started_id(started)
        async with asyncio.timeout(60):
            await settled.wait()
    finally:
        unsubscribe()
    [event] = done
    assert event.notice == (
        f"background job {job_id} (subagent: flow task) finished [status: completed]. "
        "Read its output with job_output."
    )
    read = await stack.call("job_output", job_id=job_id)
    assert read.text == "noticed answer\n[status: completed]"


@pytest.mark.parametrize("product", [CODEX, CLAUDE])
async def test_background_failure_shows_its_safe_diagnostic(stack: Any, product: str) -> None:
    _fail(stack, product)
    started = await stack.delegate(product, "FLOW-FAIL", run_in_background=True)
    job_id = started_id(started)
    read = await stack.call("job_output", job_id=job_id, wait=True, timeout_ms=60000)
    assert read.text == (
        f"(no new output)\n[status: failed, error; diagnostic: {FAILURES[product]}]"
    )
    assert SECRET_BODY not in repr(read)
    assert read.value is not None
    assert read.value["status"] == "failed"
    assert await _owned() == []


@pytest.mark.parametrize("product", [CODEX, CLAUDE])
async def test_job_kill_mid_run_settles_killed_with_no_process_left(
    stack: Any, product: str
) -> None:
    stack.hold_mid_turn(product)
    started = await stack.delegate(product, "FLOW-KILL", run_in_background=True)
    job_id = started_id(started)
    await stack.request_arrived(product)
    if product == CODEX:
        await _wait_for(stack.sleep_running)  # the product's own command is running
    assert await _owned(), "the run's processes should be alive mid-turn"
    killed = await stack.call("job_kill", job_id=job_id, reason="flow test")
    # job_kill returns once the job has settled, and it settles after its tree has exited.
    assert killed.text == f"stopped job {job_id} [status: killed, flow test]"
    assert not killed.is_error
    assert await _owned() == []
    read = await stack.call("job_output", job_id=job_id, wait=True, timeout_ms=30000)
    assert read.text == "(no new output)\n[status: killed, flow test]"
    again = await stack.call("job_kill", job_id=job_id)
    assert again.text == f"job {job_id} had already finished [status: killed, flow test]"


async def test_owner_close_cancels_live_jobs_and_their_trees(stack: Any) -> None:
    stack.hold_mid_turn(CLAUDE)
    started = await stack.delegate(CLAUDE, "FLOW-OWNER", run_in_background=True)
    job_id = started_id(started)
    await stack.request_arrived(CLAUDE)
    assert await _owned()
    await stack.harness.jobs.close_owner(stack.caller)
    assert await _owned() == []
    # The owner's record stays readable after its close, settled as killed.
    listed = await stack.call("job_list")
    assert listed.text == f"{job_id} [subagent] killed — flow task"
    read = await stack.call("job_output", job_id=job_id)
    assert (read.text, read.is_error) == ("(no new output)\n[status: killed]", False)


@pytest.mark.parametrize("product", [CODEX, CLAUDE])
async def test_a_lone_surrogate_prompt_gets_the_same_clear_error_from_both_products(
    stack: Any, product: str
) -> None:
    # A model's tool call can carry "caf\ud800" (json.loads accepts it). Codex would drop the
    # turn/start and Claude Code would accept it; both now refuse it before spawning anything.
    prefix = "subagent-codex" if product == CODEX else "subagent-claude-code"
    result = await stack.delegate(product, "caf\ud800")
    assert result.is_error
    assert result.text == (
        f"{prefix}: the one-shot task must be valid Unicode text"
        " (prompt[0] holds an unpaired surrogate)"
    )
    assert stack.tasks(product) == []
    assert await _owned() == []
