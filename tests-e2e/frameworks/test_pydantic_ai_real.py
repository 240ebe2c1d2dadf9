"""``DshToolset``: a pydantic-ai agent, driven by ``FunctionModel``, calls the REAL products.

The agent's model is pydantic-ai's own ``FunctionModel``: a script that sees every request the
agent sends it (the tool results the toolset returned included) and answers with the next tool
calls. The tools run the real Codex and the real Claude Code against their loopback model
servers (``products`` fixture).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
from pydantic_ai import Agent, CancellationToken
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from dsh.jobs import JobStatus
from dsh.tool_subagent.pydantic_ai import AgentSession, DshToolset

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(240)]

Step = Callable[[ModelRequest, AgentInfo], Awaitable[ModelResponse]]


def started_id(text: str) -> str:
    """The job id a background start named (random: ``subagent-<12 hex>``)."""
    match = re.fullmatch(r"started background subagent job (subagent-[0-9a-f]{12})", text)
    assert match is not None, text
    return match.group(1)


def scripted(steps: Sequence[Step]) -> FunctionModel:
    """A FunctionModel answering request ``i`` with ``steps[i]``; one request more fails."""
    seen: list[ModelRequest] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        request = messages[-1]
        assert isinstance(request, ModelRequest)
        seen.append(request)
        assert len(seen) <= len(steps), "the agent asked its model once more than scripted"
        return await steps[len(seen) - 1](request, info)

    return FunctionModel(model)


def call(tool: str, call_id: str, **arguments: Any) -> ToolCallPart:
    return ToolCallPart(tool_name=tool, args=arguments, tool_call_id=call_id)


def returns(request: ModelRequest) -> dict[str, ToolReturnPart]:
    """The tool results this request carries to the model, by tool call id."""
    return {p.tool_call_id: p for p in request.parts if isinstance(p, ToolReturnPart)}


def texts(request: ModelRequest) -> dict[str, str]:
    return {key: str(part.content) for key, part in returns(request).items()}


async def test_the_toolset_lists_each_tool_as_dsh_mcp_does_and_runs_both_products(
    products: Any,
) -> None:
    harness = products.harness
    toolset = DshToolset(harness, cwd=products.workspace)
    products.queue_answers()
    jobs: dict[str, str] = {}

    async def delegate_in_foreground(request: ModelRequest, info: AgentInfo) -> ModelResponse:
        listed = [(t.name, t.description, t.parameters_json_schema) for t in info.function_tools]
        assert listed == [(t.name, t.description, t.input_schema) for t in harness.tools]
        assert info.instructions is not None
        assert "appended to the result of your next dsh tool call" in info.instructions
        return ModelResponse(
            parts=[
                call("subagent_codex", "fg-codex", description="fg codex", prompt="FG codex task"),
                call(
                    "subagent_claude_code", "fg-claude", description="fg claude", prompt="FG claude"
                ),
            ]
        )

    async def start_jobs(request: ModelRequest, info: AgentInfo) -> ModelResponse:
        assert texts(request) == {
            "fg-codex": "codex foreground answer",
            "fg-claude": "claude foreground answer",
        }
        return ModelResponse(
            parts=[
                call(tool, call_id, **arguments, run_in_background=True)
                for tool, call_id, arguments in products.background_calls
            ]
        )

    async def list_once_done(request: ModelRequest, info: AgentInfo) -> ModelResponse:
        for call_id, text in texts(request).items():
            jobs[call_id] = started_id(text)
        assert sorted(jobs) == ["bg-claude", "bg-codex"]
        assert len(set(jobs.values())) == 2
        assert toolset.session is not None
        await products.settled(toolset.session.caller, 2)
        return ModelResponse(parts=[call("job_list", "list")])

    async def collect(request: ModelRequest, info: AgentInfo) -> ModelResponse:
        products.assert_listed(texts(request)["list"], jobs)
        return ModelResponse(
            parts=[call("job_output", p, job_id=jobs[f"bg-{p}"]) for p in ("codex", "claude")]
        )

    async def finish(request: ModelRequest, info: AgentInfo) -> ModelResponse:
        assert texts(request) == {
            "codex": "codex background answer\n[status: completed]",
            "claude": "claude background answer\n[status: completed]",
        }
        return ModelResponse(parts=[TextPart("all four answers arrived")])

    steps = [delegate_in_foreground, start_jobs, list_once_done, collect, finish]
    agent = Agent(scripted(steps), toolsets=[toolset])
    result = await agent.run("delegate")
    assert result.output == "all four answers arrived"
    assert toolset.session is None  # the run's owner closed with the run
    assert products.trees() == []
    assert sorted(r.task for r in products.codex.requests) == ["BG codex", "FG codex task"]
    assert sorted(r.task for r in products.claude.requests if r.task) == ["BG claude", "FG claude"]


@pytest.mark.parametrize("owner", ["the run", "a session of the caller"])
async def test_cancelling_the_run_mid_tool_returns_after_both_trees_exited(
    products: Any, owner: str
) -> None:
    """Whoever owns the calls (the run's toolset, or a session that outlives the run), the
    cancelled run's tool calls end with their trees before the cancellation returns."""
    products.hold_both_mid_turn()
    session = AgentSession(products.harness)
    toolset = DshToolset(products.harness if owner == "the run" else session)
    token = CancellationToken()

    async def hold(request: ModelRequest, info: AgentInfo) -> ModelResponse:
        return ModelResponse(
            parts=[
                call("subagent_codex", "c", description="hold codex", prompt="HOLD codex"),
                call("subagent_claude_code", "k", description="hold claude", prompt="HOLD claude"),
            ]
        )

    agent = Agent(scripted([hold]), toolsets=[toolset])
    run = asyncio.create_task(agent.run("hold", cancellation_token=token))
    await products.cancel_mid_turn(run, token.cancel, RunCancelled)
    assert not session.closed
    await session.aclose()


async def test_a_job_still_running_when_the_run_ends_is_killed_with_its_tree(
    products: Any,
) -> None:
    products.hold_both_mid_turn()
    toolset = DshToolset(products.harness)
    left: list[tuple[Any, str]] = []  # the run's owner and its job

    async def start(request: ModelRequest, info: AgentInfo) -> ModelResponse:
        bg = {"run_in_background": True}
        return ModelResponse(
            parts=[call("subagent_codex", "c", description="hold", prompt="HOLD codex", **bg)]
        )

    async def leave(request: ModelRequest, info: AgentInfo) -> ModelResponse:
        job_id = started_id(texts(request)["c"])
        await products.codex.wait_for_requests(1, timeout=60)
        session = toolset.session
        assert session is not None
        left.append((session.caller, job_id))
        (job,) = session.harness.jobs.list(session.caller)
        assert (job.id, job.status) == (job_id, JobStatus.RUNNING)
        return ModelResponse(parts=[TextPart("leaving the job behind")])

    result = await Agent(scripted([start, leave]), toolsets=[toolset]).run("go")
    assert result.output == "leaving the job behind"
    # The owner closed with the run: its job was killed.
    ((owner, job_id),) = left
    products.assert_killed_with_its_owner(owner, job_id)


async def test_one_owner_across_runs_when_the_toolset_is_entered_by_the_caller(
    products: Any,
) -> None:
    products.claude.queue_text("claude answer for the second run", match="LATER")
    toolset = DshToolset(products.harness)

    async def start(request: ModelRequest, info: AgentInfo) -> ModelResponse:
        bg = {"run_in_background": True}
        return ModelResponse(
            parts=[call("subagent_claude_code", "s", description="later", prompt="LATER", **bg)]
        )

    async def stop(request: ModelRequest, info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(texts(request)["s"])])

    started: list[str] = []

    async def collect(request: ModelRequest, info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[call("job_output", "o", job_id=started[0], wait=True)])

    async with toolset:
        first = await Agent(scripted([start, stop]), toolsets=[toolset]).run("start it")
        started.append(started_id(first.output))
        second = await Agent(scripted([collect, stop_with("o")]), toolsets=[toolset]).run("read")
        assert second.output == "claude answer for the second run\n[status: completed]"
    assert toolset.session is None


def stop_with(call_id: str) -> Step:
    async def step(request: ModelRequest, info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(texts(request)[call_id])])

    return step


async def test_a_product_failure_reaches_the_model_as_the_safe_text_only(products: Any) -> None:
    products.fail_both()
    sent: list[str] = []

    async def delegate(request: ModelRequest, info: AgentInfo) -> ModelResponse:
        return ModelResponse(
            parts=[
                call("subagent_codex", "c", description="fail", prompt="FAIL codex"),
                call("subagent_claude_code", "k", description="fail", prompt="FAIL claude"),
            ]
        )

    async def check(request: ModelRequest, info: AgentInfo) -> ModelResponse:
        sent.append(repr(request))
        parts = returns(request)
        assert {key: (p.outcome, p.content) for key, p in parts.items()} == {
            "c": ("failed", products.codex_failure),
            "k": ("failed", products.claude_failure),
        }
        return ModelResponse(parts=[TextPart("both failed")])

    result = await Agent(scripted([delegate, check]), toolsets=[DshToolset(products.harness)]).run(
        "fail"
    )
    assert result.output == "both failed"
    assert sent
    assert all(products.canary not in text for text in sent)
    assert products.canary not in repr(result.all_messages())
