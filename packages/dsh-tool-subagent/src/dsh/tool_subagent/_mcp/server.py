"""The MCP server behind ``dsh mcp``, built on the official ``mcp`` SDK's low-level ``Server``.

- Every harness tool is an MCP tool with the same name, description and JSON input schema,
  plus behaviour annotations (:func:`annotations_for`); a ``ToolResult`` becomes a text content
  block with ``isError`` from ``is_error``.
- A delegation tool with a fixed object ``output_schema`` and no background runs is listed with
  it as ``outputSchema`` and answers with ``structuredContent`` (:func:`output_schema_for`).
- One connection is one owner: a :class:`Caller` with a fresh session id (or, with ``[jobs]
  scope``, the scope's one owner) and the connection's working directory. When the connection
  closes, that owner's Jobs are cancelled and their process trees exit before
  :func:`serve_connection` returns (with ``[jobs] keep_on_close``, they are let go to run on in
  their detached processes); requests already received are answered first
  (:mod:`._mcp_drain`). Job records stay in the job store either way.
- Completion notices of background jobs ride on the next tool result, and go out as log
  notifications too (:mod:`._mcp_notices`).
- A call whose request carried a ``progressToken`` reports progress; a cancelled call cancels
  its run and waits for whole-tree exit (:mod:`._mcp_calls`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

import anyio
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from dsh.jobs.tools import ToolBase, ToolResult
from dsh.tool_subagent._agent_session import instructions_for, result_schema
from dsh.tool_subagent._contract import Tool
from dsh.tool_subagent._harness import Harness
from dsh.tool_subagent._mcp.calls import PROGRESS_INTERVAL_S, Calls
from dsh.tool_subagent._mcp.drain import draining
from dsh.tool_subagent._mcp.notices import NOTICE_LEVEL, NOTICE_LOGGER, Notices
from dsh.tool_subagent._mcp.opening import (
    NO_DELEGATION_WARNING,
    SERVER_NAME,
    Opening,
    prepared,
    wire_annotations,
    wire_tool,
)
from dsh.tool_subagent._mcp.stdin import stdin_lines
from dsh.tool_subagent._mcp.streams import ReadStream, Wrapper, WriteStream
from dsh.tool_subagent._tool import Caller
from dsh.tool_subagent._version import __version__

__all__ = [
    "NOTICE_LEVEL",
    "NOTICE_LOGGER",
    "NO_DELEGATION_WARNING",
    "SERVER_NAME",
    "annotations_for",
    "build_server",
    "instructions_for",
    "mcp_tool",
    "new_caller",
    "output_schema_for",
    "serve_connection",
    "serve_stdio",
    "to_call_result",
]

logger = logging.getLogger("dsh.tool_subagent.mcp")


def new_caller(cwd: str | None, scope: str | None = None) -> Caller:
    """The owner of one connection and the subagents' working directory: a fresh session id,
    or ``scope:<name>`` for a profile's ``[jobs] scope`` (every session of it, one owner)."""
    session = f"scope:{scope}" if scope else f"mcp-{uuid.uuid4().hex}"
    return Caller(session_id=session, cwd=cwd)


def annotations_for(tool: Tool) -> types.ToolAnnotations | None:
    """The MCP behaviour hints of a harness tool, from its ``behaviour_hints`` (None for a tool
    of unknown behaviour)."""
    hints = wire_annotations(tool)
    return None if hints is None else types.ToolAnnotations.model_validate(hints)


def output_schema_for(tool: Tool) -> dict[str, Any] | None:
    """The ``outputSchema`` an MCP host gets for ``tool``: a delegation tool's
    :attr:`SubagentTool.result_schema` (MCP's ``structuredContent`` is an object). Any other
    schema still shapes the answer, which comes back as its JSON text only."""
    return result_schema(tool)


def mcp_tool(tool: Tool) -> types.Tool:
    """A harness tool as an MCP tool: the same name, description and input schema, annotated,
    and its answer's schema when it declares one (:func:`output_schema_for`); the fields are
    the ones the opening lists before the SDK is loaded (:func:`.opening.wire_tool`)."""
    return types.Tool.model_validate(wire_tool(tool))


def to_call_result(
    result: ToolResult, notices: str | None = None, *, structured: bool = False
) -> types.CallToolResult:
    """A ``ToolResult`` as MCP text content (``isError`` from ``is_error``); pending
    completion notices follow as a second text block. ``structured``: the tool declared an
    ``outputSchema``, so a successful result's checked value is its ``structuredContent``."""
    content: list[types.TextContent] = [types.TextContent(type="text", text=result.text)]
    if notices:
        content.append(types.TextContent(type="text", text=notices))
    extra: dict[str, Any] = {}
    value = result.value or {}
    if structured and not result.is_error and isinstance(value.get("structured_output"), dict):
        extra["structured_content"] = value["structured_output"]
    if result.meta is not None:
        # Host-only facts go in ``_meta``, which hosts do not show the model; the text is
        # unchanged.
        extra["_meta"] = {f"dsh/{key}": item for key, item in result.meta.items()}
    return types.CallToolResult(content=list(content), is_error=result.is_error, **extra)


def _may_run_long(tool: Tool, arguments: Mapping[str, Any]) -> bool:
    """Whether a call may wait on a product (a delegation, a job_output that waits); a tool
    that is not a ``ToolBase`` is assumed to."""
    return tool.may_run_long(arguments) if isinstance(tool, ToolBase) else True


def build_server(
    harness: Harness,
    caller: Caller,
    notices: Notices | None = None,
    calls: Calls | None = None,
) -> Server[Any]:
    """A low-level MCP ``Server`` serving ``harness.tools`` for the one owner ``caller``."""
    tools: dict[str, Tool] = {tool.name: tool for tool in harness.tools}
    listing = [mcp_tool(tool) for tool in harness.tools]
    listing_by_name = {tool.name: tool for tool in listing}
    sink = notices if notices is not None else Notices(caller, harness.jobs)
    running = calls if calls is not None else Calls()

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        sink.bind(ctx)
        return types.ListToolsResult(tools=[tool.model_copy(deep=True) for tool in listing])

    async def invoke(tool: Tool, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        try:
            result: ToolResult = await tool.call(arguments, caller)
        except Exception as exc:
            logger.debug("tool %s raised", name, exc_info=exc)
            return ToolResult(text=f"tool {name} failed: {type(exc).__name__}", is_error=True)
        return result

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        sink.bind(ctx)
        await sink.flush_request_scoped(ctx)
        tool = tools.get(params.name)
        if tool is None:
            names = ", ".join(tools) or "none"
            result = ToolResult(
                text=f'unknown tool "{params.name}" (tools: {names})', is_error=True
            )
        else:
            arguments: Mapping[str, Any] = params.arguments or {}
            result = await running.run(
                ctx,
                params.name,
                lambda: invoke(tool, params.name, arguments),
                long=_may_run_long(tool, arguments),
            )
        await sink.flush_request_scoped(ctx)
        listed = listing_by_name.get(params.name)
        structured = listed is not None and listed.output_schema is not None
        return to_call_result(result, sink.for_result(), structured=structured)

    async def set_level(
        ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        sink.min_level = params.level
        return types.EmptyResult()

    server: Server[Any] = Server(
        SERVER_NAME,
        version=__version__,
        instructions=instructions_for(harness),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    # Registered by method (not the deprecated constructor hook) so the logging capability is
    # advertised on handshake-era connections, which is where log notices are sent.
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)
    return server


async def serve_connection(
    harness: Harness,
    read_stream: ReadStream[SessionMessage | Exception],
    write_stream: WriteStream[SessionMessage],
    *,
    caller: Caller | None = None,
    cwd: str | None = None,
    raise_exceptions: bool = False,
    progress_interval_s: float = PROGRESS_INTERVAL_S,
    answered: Any = None,
) -> Caller:
    """Serve one MCP connection until its read side closes; return its owner.

    At EOF, running tool calls are cancelled and every request already received is answered.
    Before returning (also on cancellation) the owner's Jobs are cancelled and awaited, so their
    process trees have exited, or, with ``[jobs] keep_on_close``, let go to run on detached.
    The harness itself stays open. ``answered``: the id of an ``initialize`` request that was
    answered before the SDK was loaded (:mod:`.opening`): the SDK's own answer is not sent.
    """
    owner = caller if caller is not None else new_caller(cwd)
    notices = Notices(owner, harness.jobs)
    calls = Calls(progress_interval_s)
    server = build_server(harness, owner, notices, calls)
    if answered is not None:
        write_stream = _Answered(write_stream, answered)
    reader, writer = draining(read_stream, write_stream, calls.close)
    unsubscribe = harness.jobs.on_job_done(notices.on_done)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(notices.run)
            await server.run(
                reader,
                writer,
                server.create_initialization_options(),
                raise_exceptions=raise_exceptions,
            )
            group.cancel_scope.cancel()
    finally:
        unsubscribe()
        with anyio.CancelScope(shield=True):
            if harness.jobs.config.keep_on_close:
                await harness.jobs.detach_owner(owner)
            else:
                await harness.jobs.close_owner(owner)
    return owner


class _Answered(Wrapper):
    """A write stream that drops the one response to ``request_id``: the replayed opening
    ``initialize``, which was answered already."""

    def __init__(self, inner: WriteStream[SessionMessage], request_id: Any) -> None:
        self._inner: WriteStream[SessionMessage] = inner
        self._id: Any = request_id

    async def send(self, item: SessionMessage, /) -> None:
        message = item.message
        if (
            self._id is not None
            and isinstance(message, types.JSONRPCResponse | types.JSONRPCError)
            and message.id == self._id
        ):
            self._id = None
            return
        await self._inner.send(item)


async def serve_stdio(
    profile: str | None, *, cwd: str | None, opening: Opening | None = None
) -> None:
    """Build the harness for ``profile`` and serve one connection on stdin/stdout.

    While serving, the SDK points fd 1 at stderr (and fd 0 at the null device), so stray writes
    and child processes never reach the protocol stream; product stderr goes to fd 2. When
    stdin is a pipe or socket it is read on the event loop, so a cancellation (SIGTERM, Ctrl-C)
    ends the server without waiting for stdin to reach EOF.

    ``opening``: the connection's opening was answered before the SDK was loaded, from its
    harness (built, its job store open): the SDK reads what it left and takes over.
    """
    harness = opening.harness if opening is not None else prepared(profile)
    try:
        if opening is None:
            harness.open_job_store()  # a store that cannot be used stops the server at once
        caller = new_caller(cwd, harness.jobs.config.scope)
        prefix = bytes(opening.replay) if opening is not None else b""
        answered = opening.answered if opening is not None else None
        async with (
            stdin_lines(prefix=prefix) as stdin,
            stdio_server(stdin=stdin) as (read, write),
        ):
            await serve_connection(harness, read, write, caller=caller, answered=answered)
    finally:
        with anyio.CancelScope(shield=True):
            await harness.aclose()
