"""A harness's tools as LangChain ``BaseTool`` objects (LangGraph uses them as is); needs
``langchain_core``.

Each tool calls :meth:`AgentSession.call` as the session's owner, asynchronously only (a
delegation waits on a product; there is no blocking form). A result the tool marks as an error
becomes a ``ToolException`` handled by the tool itself, so the model gets a ``ToolMessage`` with
``status="error"`` and the same safe text ``dsh mcp`` sends with ``isError``.

Every tool answers as ``content_and_artifact``: the ``ToolMessage``'s content is the text the
model gets, its ``artifact`` the checked value of a tool with a fixed output schema (else
``None``), which LangChain keeps for the host and never sends to the model.
"""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.tools import BaseTool, ToolException
from pydantic import ConfigDict, PrivateAttr

from dsh.tool_subagent._agent_session import AgentSession, typed_answer

__all__ = ["SYNC_TEXT", "DshTool", "langchain_tools"]

#: Why a dsh tool cannot be invoked synchronously.
SYNC_TEXT = "dsh tools run asynchronously only: use ainvoke (or an async agent run)"


class DshTool(BaseTool):
    """One harness tool: its own name, description and JSON schema (``args_schema``)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    handle_tool_error: bool = True
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
    _session: AgentSession = PrivateAttr()

    def __init__(self, session: AgentSession, **fields: Any) -> None:
        super().__init__(**fields)
        self._session = session

    def _run(self, *args: Any, **kwargs: Any) -> str:
        raise NotImplementedError(SYNC_TEXT)

    async def _arun(self, **arguments: Any) -> tuple[str, Any]:
        result = await self._session.call(self.name, arguments)
        if result.is_error:
            raise ToolException(result.text)
        answer = typed_answer(result)
        return result.text, None if answer is None else answer.value


def langchain_tools(session: AgentSession) -> list[BaseTool]:
    """Every tool of the session's harness (delegations, then the job tools) as a BaseTool."""
    return [
        DshTool(
            session, name=tool.name, description=tool.description, args_schema=tool.input_schema
        )
        for tool in session.tools
    ]
