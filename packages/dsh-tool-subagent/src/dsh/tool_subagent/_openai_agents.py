"""A harness's tools as OpenAI Agents SDK ``FunctionTool`` objects; needs ``agents``.

Each tool calls :meth:`AgentSession.call` as the session's owner. The SDK gives a tool only a
text output, so a result the tool marks as an error arrives as its text alone (the safe text
``dsh mcp`` sends with ``isError``). The schemas stay as the tools define them (not rewritten to
the SDK's strict form, which would make every optional field required).

When a run is cancelled the SDK cancels its tool tasks without waiting for them; the session
does: closing it (``async with AgentSession(...)`` inside the task that is cancelled) returns
once every call's process tree has exited.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from agents import FunctionTool
from agents.tool_context import ToolContext

from dsh.tool_subagent._agent_session import AgentSession

__all__ = ["INVALID_JSON_TEXT", "function_tools"]

#: The tool output when the model's arguments are not a JSON object.
INVALID_JSON_TEXT = "invalid arguments: expected a JSON object"


def _invoker(session: AgentSession, name: str) -> Callable[[ToolContext[Any], str], Awaitable[str]]:
    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return INVALID_JSON_TEXT
        result = await session.call(name, parsed)
        return result.text

    return invoke


def function_tools(session: AgentSession) -> list[FunctionTool]:
    """Every tool of the session's harness (delegations, then the job tools) as a FunctionTool,
    with the tool's own name, description and JSON schema."""
    return [
        FunctionTool(
            name=tool.name,
            description=tool.description,
            params_json_schema=tool.input_schema,
            on_invoke_tool=_invoker(session, tool.name),
            strict_json_schema=False,
        )
        for tool in session.tools
    ]
