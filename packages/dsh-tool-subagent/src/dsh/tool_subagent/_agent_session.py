"""``AgentSession``: one owner of a harness's tools for an agent framework (or a hand loop).

It is to a framework agent what one connection is to ``dsh mcp``: a :class:`Caller` with a
fresh session id that owns the background Jobs its calls start, the completion notices that ride
on its next tool result, and a close that cancels its running calls and Jobs and returns only
after their process trees have exited. The framework adapters are thin layers over
:meth:`AgentSession.call`.

A framework cancels a tool call its own way: a plain ``task.cancel()``, or an anyio cancel scope
that re-delivers the cancellation at every ``await``. Either would cut a delegation's cleanup
short if the tool ran in the framework's task, so each call runs in a task of its own that is
cancelled exactly once and awaited to its end before the cancellation goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from dsh.jobs.tools import JOB_TOOLS_GUIDE, ToolResult
from dsh.tool_subagent._contract import Caller, Tool
from dsh.tool_subagent._harness import Harness
from dsh.tool_subagent._notice_queue import NoticeQueue
from dsh.tool_subagent._tool import SubagentTool

__all__ = [
    "CLOSED_TEXT",
    "AgentSession",
    "TypedAnswer",
    "instructions_for",
    "result_schema",
    "typed_answer",
    "unknown_tool_text",
]

logger = logging.getLogger("dsh.tool_subagent")

#: The result of a call made after its session closed, or still running when it closed.
CLOSED_TEXT = "the call was cancelled: the agent session is closed"


def instructions_for(harness: Harness) -> str:
    """What the tools are for and where job notices arrive: ``dsh mcp``'s server instructions,
    and the instructions an adapter gives its framework."""
    names = ", ".join(tool.name for tool in harness.delegation_tools) or "none"
    return (
        f"Delegate self-contained tasks to coding-agent subagents (delegation tools: {names})."
        " A call with run_in_background: true returns a job id at once. When a background job"
        " finishes, its completion notice is appended to the result of your next dsh tool call;"
        f" {JOB_TOOLS_GUIDE}."
    )


def unknown_tool_text(name: str, tools: Mapping[str, Tool]) -> str:
    """The error text of a call to a tool the harness does not have (as ``dsh mcp`` words it)."""
    return f'unknown tool "{name}" (tools: {", ".join(tools) or "none"})'


def result_schema(tool: Tool) -> dict[str, Any] | None:
    """The object schema every successful result of ``tool`` matches, or ``None``: a delegation
    tool's fixed ``[[tool]] output_schema`` when it cannot run in the background (as ``dsh mcp``
    lists it as ``outputSchema``, :attr:`SubagentTool.result_schema`)."""
    return tool.result_schema if isinstance(tool, SubagentTool) else None


@dataclass(frozen=True)
class TypedAnswer:
    """A delegation's checked value (docs/structured-output.md) as a framework adapter returns it.

    ``value`` is the JSON value that matched the schema. ``rest`` is what the model-visible text
    carries after the value's compact JSON, which is one line: a worktree run's changes line and
    the owner's completion notices, or ``""``."""

    value: Any
    rest: str


def typed_answer(result: ToolResult) -> TypedAnswer | None:
    """The value of a successful result that has one (its tool or its caller set an output
    schema), else ``None``: an error, a plain text answer, a background start."""
    if result.is_error or result.value is None or "structured_output" not in result.value:
        return None
    _, _, rest = result.text.partition("\n")
    return TypedAnswer(result.value["structured_output"], rest.lstrip("\n"))


async def _wait_to_end(task: asyncio.Future[Any]) -> bool:
    """Wait for ``task`` to end however often this task is cancelled meanwhile; return whether
    a cancellation arrived (the caller re-raises it once the wait is over)."""
    try:
        import anyio
    except ImportError:  # every framework extra brings anyio; a hand loop may not have it
        scope: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    else:
        scope = anyio.CancelScope(shield=True)
    cancelled = False
    with scope:
        while not task.done():
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError:
                cancelled = True
    return cancelled


class AgentSession:
    """A harness's tools called as one owner; close it (``async with``) to end its Jobs.

    ``cwd`` is the subagents' working directory (default: this process's, when the session is
    made). The harness stays open when the session closes; one harness may serve many sessions.
    """

    def __init__(
        self,
        harness: Harness,
        *,
        cwd: str | os.PathLike[str] | None = None,
        session_id: str | None = None,
    ) -> None:
        self.harness = harness
        workdir = str(Path(cwd).absolute() if cwd is not None else Path.cwd())
        self.caller = Caller(session_id=session_id or f"agent-{uuid.uuid4().hex}", cwd=workdir)
        self._tools: dict[str, Tool] = {tool.name: tool for tool in harness.tools}
        self._notices = NoticeQueue(self.caller, harness.jobs)
        self._running: set[asyncio.Task[ToolResult]] = set()
        self._closed = False

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The harness's tools, delegations first, then the job tools (as ``dsh mcp`` lists)."""
        return self.harness.tools

    @property
    def instructions(self) -> str:
        """What the tools are for and where job notices arrive (``dsh mcp``'s instructions)."""
        return instructions_for(self.harness)

    @property
    def closed(self) -> bool:
        return self._closed

    async def call(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        """Call one tool as this session's owner; never raises for a tool's own failure.

        The result's text carries the owner's pending completion notices after a blank line.
        A cancellation cancels the call and propagates once the call has ended (a delegation:
        its process tree has exited).
        """
        tool = self._tools.get(name)
        if tool is None:
            return self._with_notices(
                ToolResult(text=unknown_tool_text(name, self._tools), is_error=True)
            )
        if self._closed:
            return ToolResult(text=CLOSED_TEXT, is_error=True)
        task = asyncio.ensure_future(self._invoke(tool, name, arguments))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        try:
            await asyncio.wait({task})
        except BaseException:
            task.cancel("the agent run was cancelled")
            await _wait_to_end(task)
            raise
        if task.cancelled():  # the session closed under the call
            return ToolResult(text=CLOSED_TEXT, is_error=True)
        return self._with_notices(task.result())

    async def _invoke(self, tool: Tool, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        try:
            return await tool.call(arguments, self.caller)
        except Exception as exc:
            # Never the exception's text: it may carry product output, paths or env values.
            logger.debug("tool %s raised", name, exc_info=exc)
            return ToolResult(text=f"tool {name} failed: {type(exc).__name__}", is_error=True)

    def _with_notices(self, result: ToolResult) -> ToolResult:
        notices = self._notices.for_result()
        if notices is None:
            return result
        return replace(result, text=f"{result.text}\n\n{notices}")

    async def aclose(self) -> None:
        """Cancel the running calls and this owner's Jobs; return once their trees have exited.

        A cancellation that arrives meanwhile is re-raised after the close has finished.
        """
        self._closed = True
        for task in tuple(self._running):
            # A call its framework cancelled is already closing its run: a second cancel could
            # cut that close short.
            if not task.cancelling():
                task.cancel(CLOSED_TEXT)
        cancelled = await self._settle()
        try:
            await self.harness.jobs.close_owner(self.caller)
        finally:
            if cancelled:
                raise asyncio.CancelledError

    async def settle(self) -> None:
        """Wait until no call of this session is running (a cancelled one: its tree has exited).

        For a session that outlives a cancelled run: some frameworks (the Agents SDK) cancel
        their tool tasks without waiting for them.
        """
        if await self._settle():
            raise asyncio.CancelledError

    async def _settle(self) -> bool:
        cancelled = False
        while self._running:
            task = next(iter(self._running))
            cancelled = await _wait_to_end(task) or cancelled
            self._running.discard(task)  # its done callback may not have run yet
        return cancelled

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
