"""``function_tools``: an OpenAI Agents SDK agent, driven by ``ScriptedModel``, calls the REAL
products.

The agent's model is the SDK's own ``agents.testing.ScriptedModel``: each step sees the call the
agent makes to its model (the tool outputs included) and answers with the next tool calls. The
tools run the real Codex and the real Claude Code against their loopback model servers
(``products`` fixture). Tracing is off: nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
from agents import Agent, FunctionTool, RunConfig, Runner
from agents.items import TResponseOutputItem
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from dsh.tool_subagent.openai_agents import AgentSession, function_tools

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(240)]

Step = Callable[[ModelCall], Awaitable[Sequence[TResponseOutputItem]]]
QUIET = RunConfig(tracing_disabled=True)


def started_id(text: str) -> str:
    """The job id a background start named (random: ``subagent-<12 hex>``)."""
    match = re.fullmatch(r"started background subagent job (subagent-[0-9a-f]{12})", text)
    assert match is not None, text
    return match.group(1)


def scripted(steps: Sequence[Step]) -> ScriptedModel:
    return ScriptedModel([ModelStep.respond(step) for step in steps])


def outputs(model_call: ModelCall) -> dict[str, str]:
    """Every tool output the agent sent its model in this call, by call id."""
    items = model_call.input if isinstance(model_call.input, list) else []
    return {
        item["call_id"]: str(item["output"])
        for item in items
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


def call(tool: str, call_id: str, **arguments: Any) -> TResponseOutputItem:
    return function_call(tool, arguments, call_id=call_id)


def agent_for(session: AgentSession, steps: Sequence[Step]) -> Agent[Any]:
    return Agent(
        name="lead",
        instructions=session.instructions,
        model=scripted(steps),
        tools=list(function_tools(session)),
    )


async def test_the_function_tools_are_dsh_mcps_tools_and_run_both_products(
    products: Any,
) -> None:
    harness = products.harness
    products.queue_answers()
    jobs: dict[str, str] = {}
    session = AgentSession(harness, cwd=products.workspace)

    async def delegate_in_foreground(model_call: ModelCall) -> Sequence[TResponseOutputItem]:
        tools = [t for t in model_call.tools if isinstance(t, FunctionTool)]
        assert len(tools) == len(model_call.tools)
        listed = [(t.name, t.description, t.params_json_schema) for t in tools]
        assert listed == [(t.name, t.description, t.input_schema) for t in harness.tools]
        assert model_call.system_instructions == session.instructions
        return [
            call("subagent_codex", "fg-codex", description="fg codex", prompt="FG codex task"),
            call("subagent_claude_code", "fg-claude", description="fg claude", prompt="FG claude"),
        ]

    async def start_jobs(model_call: ModelCall) -> Sequence[TResponseOutputItem]:
        seen = outputs(model_call)
        assert (seen["fg-codex"], seen["fg-claude"]) == (
            "codex foreground answer",
            "claude foreground answer",
        )
        return [
            call(tool, call_id, **arguments, run_in_background=True)
            for tool, call_id, arguments in products.background_calls
        ]

    async def list_once_done(model_call: ModelCall) -> Sequence[TResponseOutputItem]:
        seen = outputs(model_call)
        for call_id in ("bg-codex", "bg-claude"):
            jobs[call_id] = started_id(seen[call_id])
        assert len(set(jobs.values())) == 2
        await products.settled(session.caller, 2)
        return [call("job_list", "list")]

    async def collect(model_call: ModelCall) -> Sequence[TResponseOutputItem]:
        products.assert_listed(outputs(model_call)["list"], jobs)
        return [call("job_output", p, job_id=jobs[f"bg-{p}"]) for p in ("codex", "claude")]

    async def finish(model_call: ModelCall) -> Sequence[TResponseOutputItem]:
        seen = outputs(model_call)
        assert (seen["codex"], seen["claude"]) == (
            "codex background answer\n[status: completed]",
            "claude background answer\n[status: completed]",
        )
        return [assistant_message("all four answers arrived")]

    steps = [delegate_in_foreground, start_jobs, list_once_done, collect, finish]
    async with session:
        result = await Runner.run(agent_for(session, steps), "delegate", run_config=QUIET)
    assert result.final_output == "all four answers arrived"
    assert products.trees() == []
    assert sorted(r.task for r in products.codex.requests) == ["BG codex", "FG codex task"]
    assert sorted(r.task for r in products.claude.requests if r.task) == ["BG claude", "FG claude"]


async def test_cancelling_the_run_mid_tool_returns_after_both_trees_exited(products: Any) -> None:
    """The SDK cancels its tool tasks without waiting; the session, entered in the cancelled
    task, waits for the trees before the cancellation goes on."""
    products.hold_both_mid_turn()

    async def hold(model_call: ModelCall) -> Sequence[TResponseOutputItem]:
        return [
            call("subagent_codex", "c", description="hold codex", prompt="HOLD codex"),
            call("subagent_claude_code", "k", description="hold claude", prompt="HOLD claude"),
        ]

    async def run_as_one_owner() -> None:
        async with AgentSession(products.harness) as session:
            await Runner.run(agent_for(session, [hold]), "hold", run_config=QUIET)

    run = asyncio.create_task(run_as_one_owner())
    await products.cancel_mid_turn(run)


async def test_the_sdks_own_cancel_then_settle_returns_after_both_trees_exited(
    products: Any,
) -> None:
    """``RunResultStreaming.cancel()`` leaves the tool tasks to finish on their own; a session
    that outlives the run waits for them with ``settle()``."""
    products.hold_both_mid_turn()

    async def hold(model_call: ModelCall) -> Sequence[TResponseOutputItem]:
        return [
            call("subagent_codex", "c", description="hold codex", prompt="HOLD codex"),
            call("subagent_claude_code", "k", description="hold claude", prompt="HOLD claude"),
        ]

    async with AgentSession(products.harness) as session:
        streamed = Runner.run_streamed(agent_for(session, [hold]), "hold", run_config=QUIET)

        async def consume() -> int:
            return len([event async for event in streamed.stream_events()])

        consumer = asyncio.create_task(consume())
        await products.both_mid_turn()
        assert len(products.trees()) >= 3
        streamed.cancel()
        assert await consumer > 0  # the stream ended
        await session.settle()
        assert products.trees() == []  # no settling: the walk runs the moment settle returned
        assert not session.closed


async def test_a_job_still_running_when_the_owner_closes_is_killed_with_its_tree(
    products: Any,
) -> None:
    products.hold_both_mid_turn()

    async def start(model_call: ModelCall) -> Sequence[TResponseOutputItem]:
        bg = {"run_in_background": True}
        return [call("subagent_codex", "c", description="hold", prompt="HOLD codex", **bg)]

    started: list[str] = []

    async def leave(model_call: ModelCall) -> Sequence[TResponseOutputItem]:
        seen = outputs(model_call)
        assert list(seen) == ["c"]
        started.append(started_id(seen["c"]))
        await products.codex.wait_for_requests(1, timeout=60)
        return [assistant_message("leaving the job behind")]

    async with AgentSession(products.harness) as session:
        result = await Runner.run(agent_for(session, [start, leave]), "go", run_config=QUIET)
        assert result.final_output == "leaving the job behind"
        products.assert_running(session.caller, started[0])
    products.assert_killed_with_its_owner(session.caller, started[0])


async def test_a_product_failure_reaches_the_model_as_the_safe_text_only(products: Any) -> None:
    products.fail_both()
    sent: list[str] = []

    async def delegate(model_call: ModelCall) -> Sequence[TResponseOutputItem]:
        return [
            call("subagent_codex", "c", description="fail", prompt="FAIL codex"),
            call("subagent_claude_code", "k", description="fail", prompt="FAIL claude"),
        ]

    async def check(model_call: ModelCall) -> Sequence[TResponseOutputItem]:
        sent.append(repr(model_call.input))
        seen = outputs(model_call)
        assert (seen["c"], seen["k"]) == (products.codex_failure, products.claude_failure)
        return [assistant_message("both failed")]

    async with AgentSession(products.harness) as session:
        result = await Runner.run(agent_for(session, [delegate, check]), "fail", run_config=QUIET)
    assert result.final_output == "both failed"
    assert sent
    assert all(products.canary not in text for text in sent)
