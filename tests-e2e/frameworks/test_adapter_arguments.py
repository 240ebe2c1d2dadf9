"""Bad arguments from a framework's model get the tool's own safe text, as over MCP.

No product runs here (``FakeProvider``): what is checked is the path from a model's malformed
tool call, through each framework, to the tool's argument check and back.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents.tool_context import ToolContext
from langchain_core.messages import ToolMessage
from pydantic_ai import Agent
from pydantic_ai import messages as ai_messages
from pydantic_ai.models.function import AgentInfo, FunctionModel

from dsh.jobs import JobRegistry
from dsh.jobs.tools import job_tools
from dsh.subagent import SubagentService
from dsh.subagent.testing import FakeProvider
from dsh.tool_subagent import AgentSession, Harness, SubagentTool, SubagentToolConfig
from dsh.tool_subagent.langchain import langchain_tools
from dsh.tool_subagent.openai_agents import INVALID_JSON_TEXT, function_tools
from dsh.tool_subagent.pydantic_ai import DshToolset

NOT_AN_OBJECT = "invalid arguments: expected an object"
NO_PROMPT = 'invalid arguments: missing required field "prompt"'


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    service, jobs = SubagentService(), JobRegistry()
    service.register(FakeProvider("fake"))
    config = SubagentToolConfig(provider="fake", tool_name="subagent_fake")
    tools = (SubagentTool(config, service, jobs), *job_tools(jobs))
    async with Harness(service, jobs, tools, {"fake": "fake"}) as built:
        yield built


async def test_pydantic_ai_returns_the_tools_text_as_a_failed_return(harness: Harness) -> None:
    calls = [
        ai_messages.ToolCallPart("subagent_fake", "[1]", tool_call_id="array"),
        ai_messages.ToolCallPart("subagent_fake", {"description": "d"}, tool_call_id="partial"),
    ]
    seen: list[dict[str, tuple[str, str]]] = []

    async def model(
        messages: list[ai_messages.ModelMessage], info: AgentInfo
    ) -> ai_messages.ModelResponse:
        if len(messages) == 1:
            return ai_messages.ModelResponse(parts=calls)
        request = messages[-1]
        assert isinstance(request, ai_messages.ModelRequest)
        parts = [p for p in request.parts if isinstance(p, ai_messages.ToolReturnPart)]
        seen.append({p.tool_call_id: (p.outcome, str(p.content)) for p in parts})
        return ai_messages.ModelResponse(parts=[ai_messages.TextPart("done")])

    result = await Agent(FunctionModel(model), toolsets=[DshToolset(harness)]).run("go")
    assert result.output == "done"
    assert seen == [{"array": ("failed", NOT_AN_OBJECT), "partial": ("failed", NO_PROMPT)}]


async def test_the_agents_sdk_tool_answers_bad_json_with_a_fixed_text(harness: Harness) -> None:
    async with AgentSession(harness) as session:
        tool = function_tools(session)[0]
        context = ToolContext(
            context=None, tool_name=tool.name, tool_call_id="c", tool_arguments=""
        )
        answers = [
            await tool.on_invoke_tool(context, text)
            for text in ("{not json", "[1]", json.dumps({"description": "d"}))
        ]
    assert answers == [INVALID_JSON_TEXT, NOT_AN_OBJECT, NO_PROMPT]


async def test_langchain_returns_the_tools_text_as_an_error_message(harness: Harness) -> None:
    async with AgentSession(harness) as session:
        tool = langchain_tools(session)[0]
        call: dict[str, Any] = {
            "name": tool.name,
            "args": {"description": "d"},
            "id": "c",
            "type": "tool_call",
        }
        message = await tool.ainvoke(call)
        with pytest.raises(NotImplementedError, match="asynchronously only"):
            tool.invoke(call)
    assert isinstance(message, ToolMessage)
    assert (message.status, message.content) == ("error", NO_PROMPT)


async def test_pydantic_ai_declares_an_object_schema_of_a_foreground_only_tool() -> None:
    # What dsh mcp lists as outputSchema, and only that (a background start answers a job id).
    service, jobs = SubagentService(), JobRegistry()
    service.register(FakeProvider("fake"))
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    rows: dict[str, dict[str, Any]] = {
        "typed": {"output_schema": schema, "enable_run_in_background": False},
        "background": {"output_schema": schema},
        "array": {"output_schema": {"type": "array"}, "enable_run_in_background": False},
    }
    tools = [
        SubagentTool(SubagentToolConfig(provider="fake", tool_name=name, **row), service, jobs)
        for name, row in rows.items()
    ]
    async with Harness(service, jobs, tuple(tools), {"fake": "fake"}) as harness:
        listed = await DshToolset(harness).get_tools(None)  # type: ignore[arg-type]
    declared = {name: listed[name].tool_def.return_schema for name in rows}
    assert declared == {"typed": schema, "background": None, "array": None}
