"""A harness's tools as OpenAI Agents SDK ``FunctionTool`` objects; needs ``agents``.

Each tool calls :meth:`AgentSession.call` as the session's owner. The SDK gives a tool only a
text output, so a result the tool marks as an error arrives as its text alone (the safe text
``dsh mcp`` sends with ``isError``). The schemas stay as the tools define them (not rewritten to
the SDK's strict form, which would make every optional field required).

A tool with a fixed output schema answers the model with the value's compact JSON, and its
checked value rides on the run's ``ToolCallOutputItem.custom_data["structured_output"]``, the
SDK's host-only data that is never sent to the model.

When a run is cancelled the SDK cancels its tool tasks without waiting for them; the session
does: closing it (``async with AgentSession(...)`` inside the task that is cancelled) returns
once every call's process tree has exited.
"""

from __future__ import annotations

import json
from typing import Any

from agents import FunctionTool
from agents.tool import FunctionToolCustomDataContext
from agents.tool_context import ToolContext

from dsh.tool_subagent._agent_session import AgentSession, typed_answer

__all__ = ["INVALID_JSON_TEXT", "function_tools"]

#: The tool output when the model's arguments are not a JSON object.
INVALID_JSON_TEXT = "invalid arguments: expected a JSON object"


class _Invoker:
    """One tool's calls: the text for the model, the value kept for the host by call id."""

    def __init__(self, session: AgentSession, name: str) -> None:
        self._session, self._name = session, name
        self._values: dict[str, Any] = {}

    async def invoke(self, context: ToolContext[Any], arguments: str) -> str:
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return INVALID_JSON_TEXT
        result = await self._session.call(self._name, parsed)
        answer = typed_answer(result)
        if answer is not None:
            self._values[context.tool_call_id] = answer.value
        return result.text

    def custom_data(self, context: FunctionToolCustomDataContext) -> dict[str, Any] | None:
        call_id = context.tool_context.tool_call_id
        if call_id not in self._values:
            return None
        return {"structured_output": self._values.pop(call_id)}


def _function_tool(session: AgentSession, name: str, description: str, schema: Any) -> FunctionTool:
    invoker = _Invoker(session, name)
    return FunctionTool(
        name=name,
        description=description,
        params_json_schema=schema,
        on_invoke_tool=invoker.invoke,
        strict_json_schema=False,
        custom_data_extractor=invoker.custom_data,
    )


def function_tools(session: AgentSession) -> list[FunctionTool]:
    """Every tool of the session's harness (delegations, then the job tools) as a FunctionTool,
    with the tool's own name, description and JSON schema."""
    return [
        _function_tool(session, tool.name, tool.description, tool.input_schema)
        for tool in session.tools
    ]
