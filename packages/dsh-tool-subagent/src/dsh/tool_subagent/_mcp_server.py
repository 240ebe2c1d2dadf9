"""The MCP server behind ``dsh mcp``, built on the official ``mcp`` SDK's low-level ``Server``.

- Every harness tool is an MCP tool with the same name, description and JSON input schema; a
  ``ToolResult`` becomes one text content block with ``isError`` from ``is_error``.
- One connection is one owner: a :class:`Caller` with a fresh session id and the connection's
  working directory. When the connection closes, that owner's Jobs are cancelled and their
  process trees exit before :func:`serve_connection` returns.
- A background job that finishes unreported sends its completion notice as a
  ``notifications/message`` log notification (level ``notice``, logger ``dsh.jobs``). On a
  handshake-era connection it is sent at once; on a 2026-07-28 connection (where log delivery
  is a per-request opt-in) it rides the next ``tools/call`` that opted in.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Mapping
from typing import Any, get_args

import anyio
from mcp import types
from mcp.server.connection import allowed_log_levels
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.session import ServerSession
from mcp.server.stdio import stdio_server
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.message import SessionMessage
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from dsh.jobs import JobDone
from dsh.jobs.tools import ToolResult
from dsh.tool_subagent._harness import Harness
from dsh.tool_subagent._mcp_stdin import stdin_lines
from dsh.tool_subagent._tool import Caller

__all__ = [
    "NOTICE_LEVEL",
    "NOTICE_LOGGER",
    "SERVER_NAME",
    "build_server",
    "mcp_tool",
    "new_caller",
    "serve_connection",
    "serve_stdio",
    "to_call_result",
]

logger = logging.getLogger("dsh.tool_subagent.mcp")

SERVER_NAME = "dsh"
NOTICE_LEVEL: types.LoggingLevel = "notice"
NOTICE_LOGGER = "dsh.jobs"
_LEVELS: tuple[str, ...] = get_args(types.LoggingLevel)


def new_caller(cwd: str | None) -> Caller:
    """The owner of one connection: a fresh session id and the subagents' working directory."""
    return Caller(session_id=f"mcp-{uuid.uuid4().hex}", cwd=cwd)


def mcp_tool(tool: Any) -> types.Tool:
    """A harness tool as an MCP tool: the same name, description and input schema."""
    return types.Tool(name=tool.name, description=tool.description, input_schema=tool.input_schema)


def to_call_result(result: ToolResult) -> types.CallToolResult:
    """A ``ToolResult`` as MCP text content, with ``isError`` from ``is_error``."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=result.text)], is_error=result.is_error
    )


def _notice_message(text: str) -> types.LoggingMessageNotification:
    params = types.LoggingMessageNotificationParams(
        level=NOTICE_LEVEL, logger=NOTICE_LOGGER, data=text
    )
    return types.LoggingMessageNotification(params=params)


class _Notices:
    """Completion notices of one owner, delivered as MCP log notifications."""

    def __init__(self, caller: Caller) -> None:
        self._caller = caller
        self._pending: deque[str] = deque()
        self._session: ServerSession | None = None
        self._wake = asyncio.Event()
        self.min_level: str = "debug"

    def on_done(self, event: JobDone) -> None:
        if event.notice is None or event.snapshot.owner_session != self._caller.session_id:
            return
        self._pending.append(event.notice)
        self._wake.set()

    def _wanted(self) -> bool:
        return _LEVELS.index(NOTICE_LEVEL) >= _LEVELS.index(self.min_level)

    def bind(self, ctx: ServerRequestContext[Any, Any]) -> None:
        """Remember the connection's session for standalone delivery (handshake era only)."""
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            self._session = ctx.session
            self._wake.set()

    async def run(self) -> None:
        """Send pending notices on the connection's standalone channel as they arrive."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            session = self._session
            while session is not None and self._pending:
                notice = self._pending.popleft()
                if not self._wanted():
                    continue
                try:
                    await session.send_notification(_notice_message(notice))
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    logger.debug("connection closed; a completion notice was not sent")
                    return
                except Exception:
                    logger.debug("a completion notice could not be sent", exc_info=True)

    async def flush_request_scoped(self, ctx: ServerRequestContext[Any, Any]) -> None:
        """On a 2026-07-28 connection, send pending notices on this request's stream if the
        request opted in to log delivery at or below the notice level."""
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS or not self._pending:
            return
        if NOTICE_LEVEL not in allowed_log_levels(ctx.protocol_version, ctx.meta):
            return
        while self._pending:
            notice = self._pending.popleft()
            await ctx.session.send_notification(
                _notice_message(notice), related_request_id=ctx.request_id
            )


def build_server(harness: Harness, caller: Caller, notices: _Notices | None = None) -> Server[Any]:
    """A low-level MCP ``Server`` serving ``harness.tools`` for the one owner ``caller``."""
    tools: dict[str, Any] = {tool.name: tool for tool in harness.tools}
    listing = [mcp_tool(tool) for tool in harness.tools]
    sink = notices if notices is not None else _Notices(caller)

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        sink.bind(ctx)
        return types.ListToolsResult(tools=[tool.model_copy(deep=True) for tool in listing])

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
            try:
                result = await tool.call(arguments, caller)
            except Exception as exc:
                logger.debug("tool %s raised", params.name, exc_info=exc)
                result = ToolResult(
                    text=f"tool {params.name} failed: {type(exc).__name__}", is_error=True
                )
        await sink.flush_request_scoped(ctx)
        return to_call_result(result)

    async def set_level(
        ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        sink.min_level = params.level
        return types.EmptyResult()

    server: Server[Any] = Server(
        SERVER_NAME,
        version=_version(),
        instructions=(
            "Delegate self-contained tasks to coding-agent subagents. Background jobs are"
            " collected with job_output and stopped with job_kill; a finished job is also"
            " announced as a log notification."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    # Registered by method (not the deprecated constructor hook) so the logging capability is
    # advertised on handshake-era connections, which is where the notices are sent.
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)
    return server


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dsh-tool-subagent")
    except PackageNotFoundError:
        return "0"


async def serve_connection(
    harness: Harness,
    read_stream: ReadStream[SessionMessage | Exception],
    write_stream: WriteStream[SessionMessage],
    *,
    caller: Caller | None = None,
    cwd: str | None = None,
    raise_exceptions: bool = False,
) -> Caller:
    """Serve one MCP connection until its read side closes; return its owner.

    Before returning (also on cancellation) the owner's Jobs are cancelled and awaited, so their
    process trees have exited. The harness itself stays open.
    """
    owner = caller if caller is not None else new_caller(cwd)
    notices = _Notices(owner)
    server = build_server(harness, owner, notices)
    unsubscribe = harness.jobs.on_job_done(notices.on_done)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(notices.run)
            await server.run(
                read_stream,
                write_stream,
                server.create_initialization_options(),
                raise_exceptions=raise_exceptions,
            )
            group.cancel_scope.cancel()
    finally:
        unsubscribe()
        with anyio.CancelScope(shield=True):
            await harness.jobs.close_owner(owner)
    return owner


async def serve_stdio(profile: str | None, *, cwd: str | None) -> None:
    """Build the harness for ``profile`` and serve one connection on stdin/stdout.

    While serving, the SDK points fd 1 at stderr (and fd 0 at the null device), so stray writes
    and child processes never reach the protocol stream; product stderr goes to fd 2. When
    stdin is a pipe or socket it is read on the event loop, so a cancellation (SIGTERM, Ctrl-C)
    ends the server without waiting for stdin to reach EOF.
    """
    harness = Harness.from_profile(profile)
    try:
        async with stdin_lines() as stdin, stdio_server(stdin=stdin) as (read, write):
            await serve_connection(harness, read, write, caller=new_caller(cwd))
    finally:
        with anyio.CancelScope(shield=True):
            await harness.aclose()
