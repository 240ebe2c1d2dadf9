"""A harness's tools as a pydantic-ai toolset (``DshToolset``); needs ``pydantic_ai``.

The toolset is the owner's lifetime: pydantic-ai enters a toolset around each agent run, and
the outermost entry opens an :class:`AgentSession` that the matching exit closes (its running
calls and background Jobs cancelled, their trees gone). Entering the toolset yourself
(``async with toolset:``) keeps one owner across several runs, so a Job started in one run can
be collected in the next. Built from an ``AgentSession`` instead, the toolset uses that session
and leaves closing it to you.

A tool with a fixed output schema returns its checked value, not text: pydantic-ai gives the
model the value's JSON and keeps the value itself in ``ToolReturnPart.content``; the tool's
definition carries the schema as its ``return_schema`` when it is an object schema.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pydantic_ai import RunContext, ToolDefinition, ToolFailed, ToolReturn
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from dsh.tool_subagent._agent_session import (
    CLOSED_TEXT,
    AgentSession,
    instructions_for,
    result_schema,
    typed_answer,
)
from dsh.tool_subagent._harness import Harness

__all__ = ["DshToolset"]

# Arguments reach the tool as the model sent them (an array too): the tool's own check answers a
# bad call with the same safe text as over MCP, which pydantic-ai's validation would word
# differently. Only arguments that are not JSON at all are pydantic-ai's to retry.
_AS_SENT = SchemaValidator(schema=core_schema.any_schema())
#: pydantic-ai's own default: one retry prompt for arguments that are not JSON.
_RETRIES = 1


class DshToolset(AbstractToolset[Any]):
    """Every tool of a harness (delegations, then ``job_output``, ``job_list``, ``job_kill``).

    Names, descriptions and JSON schemas are the harness tools' own. A result the tool marks as
    an error reaches the model as a failed tool return (``ToolFailed``) with the same text.
    """

    def __init__(
        self,
        source: Harness | AgentSession,
        *,
        cwd: str | os.PathLike[str] | None = None,
        id: str | None = "dsh",
    ) -> None:
        self._session: AgentSession | None = None
        if isinstance(source, AgentSession):
            if cwd is not None:
                raise ValueError("cwd is the session's own: give it to AgentSession instead")
            self._harness, self._session, self._owns = source.harness, source, False
        else:
            self._harness, self._session, self._owns = source, None, True
        self._cwd = cwd
        self._id = id
        self._entered = 0
        self._lock = asyncio.Lock()

    @property
    def id(self) -> str | None:
        return self._id

    @property
    def session(self) -> AgentSession | None:
        """The owner the calls run as: while entered, or the session it was built from."""
        return self._session

    async def __aenter__(self) -> DshToolset:
        async with self._lock:
            if self._owns and self._entered == 0:
                self._session = AgentSession(self._harness, cwd=self._cwd)
            self._entered += 1
        return self

    async def __aexit__(self, *args: Any) -> bool | None:
        async with self._lock:
            self._entered -= 1
            session = self._session if self._owns and self._entered == 0 else None
            if session is not None:
                self._session = None
                await session.aclose()
        return None

    async def get_instructions(self, ctx: RunContext[Any]) -> str:
        return instructions_for(self._harness)

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        return {
            tool.name: ToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(
                    name=tool.name,
                    description=tool.description,
                    parameters_json_schema=tool.input_schema,
                    return_schema=result_schema(tool),
                ),
                # A tool's own failure is a ToolFailed, which uses no retry: an answer to adapt to.
                max_retries=_RETRIES,
                args_validator=_AS_SENT,
            )
            for tool in self._harness.tools
        }

    async def call_tool(
        self, name: str, tool_args: Any, ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        session = self._session
        if session is None:  # called outside an agent run and outside ``async with``
            raise ToolFailed(CLOSED_TEXT)
        result = await session.call(name, tool_args)
        if result.is_error:
            raise ToolFailed(result.text)
        answer = typed_answer(result)
        if answer is None:
            return result.text
        if answer.rest:  # a changes line, completion notices: beside the value, for the model
            return ToolReturn(return_value=answer.value, content=answer.rest)
        return answer.value
