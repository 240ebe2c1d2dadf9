"""``langchain_tools``: a LangChain agent (``create_agent``, a LangGraph graph) driven by a fake
chat model calls the REAL products.

The chat model is a scripted ``BaseChatModel``: each step sees the messages the agent sends it
(the ``ToolMessage`` results included) and answers with the next ``AIMessage`` and its tool
calls. The tools run the real Codex and the real Claude Code against their loopback model
servers (``products`` fixture).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from dsh.tool_subagent.langchain import AgentSession, langchain_tools

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(240)]

Step = Callable[[list[BaseMessage]], Awaitable[AIMessage]]


def started_id(text: str) -> str:
    """The job id a background start named (random: ``subagent-<12 hex>``)."""
    match = re.fullmatch(r"started background subagent job (subagent-[0-9a-f]{12})", text)
    assert match is not None, text
    return match.group(1)


class ScriptedChatModel(BaseChatModel):
    """A fake chat model answering request ``i`` with ``steps[i]``; one request more fails."""

    steps: Sequence[Step]
    seen: list[list[BaseMessage]] = Field(default_factory=list)
    bound: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        raise NotImplementedError("the agent runs asynchronously")

    async def _agenerate(
        self, messages: list[BaseMessage], *args: Any, **kwargs: Any
    ) -> ChatResult:
        self.seen.append(list(messages))
        assert len(self.seen) <= len(self.steps), "the agent asked its model once more"
        reply = await self.steps[len(self.seen) - 1](messages)
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        self.bound = [convert_to_openai_tool(tool) for tool in tools]
        return self


def calls(*items: tuple[str, str, dict[str, Any]]) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[
            {"name": name, "args": args, "id": call_id, "type": "tool_call"}
            for name, call_id, args in items
        ],
    )


def results(messages: list[BaseMessage]) -> dict[str, ToolMessage]:
    """The tool results among the messages sent to the model, by tool call id."""
    return {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}


def texts(messages: list[BaseMessage]) -> dict[str, str]:
    return {key: str(message.content) for key, message in results(messages).items()}


def fg(description: str, prompt: str) -> dict[str, Any]:
    return {"description": description, "prompt": prompt}


def bg(description: str, prompt: str) -> dict[str, Any]:
    return {"description": description, "prompt": prompt, "run_in_background": True}


def to_both(codex: dict[str, Any], claude: dict[str, Any]) -> AIMessage:
    """The model's calls of both products' delegation tools: ``c`` to Codex, ``k`` to Claude
    Code."""
    return calls(("subagent_codex", "c", codex), ("subagent_claude_code", "k", claude))


async def run_agent(session: AgentSession, steps: Sequence[Step]) -> tuple[str, ScriptedChatModel]:
    model = ScriptedChatModel(steps=steps)
    agent = create_agent(model, langchain_tools(session), system_prompt=session.instructions)
    state = await agent.ainvoke({"messages": [HumanMessage("delegate")]})
    return str(state["messages"][-1].content), model


async def test_the_tools_are_dsh_mcps_tools_and_run_both_products(products: Any) -> None:
    harness = products.harness
    products.queue_answers()
    jobs: dict[str, str] = {}
    session = AgentSession(harness, cwd=products.workspace)

    async def delegate_in_foreground(messages: list[BaseMessage]) -> AIMessage:
        assert messages[0].content == session.instructions
        return calls(
            ("subagent_codex", "fg-codex", fg("fg codex", "FG codex task")),
            ("subagent_claude_code", "fg-claude", fg("fg claude", "FG claude")),
        )

    async def start_jobs(messages: list[BaseMessage]) -> AIMessage:
        assert texts(messages) == {
            "fg-codex": "codex foreground answer",
            "fg-claude": "claude foreground answer",
        }
        return calls(
            ("subagent_codex", "bg-codex", bg("bg codex", "BG codex")),
            ("subagent_claude_code", "bg-claude", bg("bg claude", "BG claude")),
        )

    async def list_once_done(messages: list[BaseMessage]) -> AIMessage:
        seen = texts(messages)
        for call_id in ("bg-codex", "bg-claude"):
            jobs[call_id] = started_id(seen[call_id])
        assert len(set(jobs.values())) == 2
        await products.settled(session.caller, 2)
        return calls(("job_list", "list", {}))

    async def collect(messages: list[BaseMessage]) -> AIMessage:
        products.assert_listed(texts(messages)["list"], jobs)
        return calls(*(("job_output", p, {"job_id": jobs[f"bg-{p}"]}) for p in ("codex", "claude")))

    async def finish(messages: list[BaseMessage]) -> AIMessage:
        seen = texts(messages)
        assert (seen["codex"], seen["claude"]) == (
            "codex background answer\n[status: completed]",
            "claude background answer\n[status: completed]",
        )
        return AIMessage(content="all four answers arrived")

    steps = [delegate_in_foreground, start_jobs, list_once_done, collect, finish]
    async with session:
        answer, model = await run_agent(session, steps)
    assert answer == "all four answers arrived"
    assert model.bound == [tool.to_openai_tool() for tool in harness.tools]
    assert products.trees() == []
    assert sorted(r.task for r in products.codex.requests) == ["BG codex", "FG codex task"]
    assert sorted(r.task for r in products.claude.requests if r.task) == ["BG claude", "FG claude"]


async def test_cancelling_the_run_mid_tool_returns_after_both_trees_exited(products: Any) -> None:
    products.hold_both_mid_turn()

    async def hold(messages: list[BaseMessage]) -> AIMessage:
        return to_both(fg("hold codex", "HOLD codex"), fg("hold claude", "HOLD claude"))

    async def run_as_one_owner() -> None:
        async with AgentSession(products.harness) as session:
            await run_agent(session, [hold])

    run = asyncio.create_task(run_as_one_owner())
    await products.cancel_mid_turn(run)


async def test_a_job_still_running_when_the_owner_closes_is_killed_with_its_tree(
    products: Any,
) -> None:
    products.hold_both_mid_turn()

    async def start(messages: list[BaseMessage]) -> AIMessage:
        return calls(("subagent_codex", "c", bg("hold", "HOLD codex")))

    started: list[str] = []

    async def leave(messages: list[BaseMessage]) -> AIMessage:
        seen = texts(messages)
        assert list(seen) == ["c"]
        started.append(started_id(seen["c"]))
        await products.codex.wait_for_requests(1, timeout=60)
        return AIMessage(content="leaving the job behind")

    async with AgentSession(products.harness) as session:
        answer, _ = await run_agent(session, [start, leave])
        assert answer == "leaving the job behind"
        products.assert_running(session.caller, started[0])
    products.assert_killed_with_its_owner(session.caller, started[0])


async def test_a_product_failure_reaches_the_model_as_the_safe_text_only(products: Any) -> None:
    products.fail_both()

    async def delegate(messages: list[BaseMessage]) -> AIMessage:
        return to_both(fg("fail", "FAIL codex"), fg("fail", "FAIL claude"))

    async def check(messages: list[BaseMessage]) -> AIMessage:
        seen = results(messages)
        assert {key: (m.status, m.content) for key, m in seen.items()} == {
            "c": ("error", products.codex_failure),
            "k": ("error", products.claude_failure),
        }
        return AIMessage(content="both failed")

    async with AgentSession(products.harness) as session:
        answer, model = await run_agent(session, [delegate, check])
    assert answer == "both failed"
    assert len(model.seen) == 2
    assert all(products.canary not in repr(messages) for messages in model.seen)
