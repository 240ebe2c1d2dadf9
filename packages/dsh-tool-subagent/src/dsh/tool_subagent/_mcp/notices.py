"""Completion notices of one MCP connection's owner, on every channel a host might surface.

- **Tool results** (what a host's model sees): the owner's unreported completion notices ride
  on the next dsh tool result as an extra text block, each once (:mod:`._notice_queue` bounds
  how many ride one result). Neither Claude Code nor Codex shows MCP log messages to its model,
  so this is the channel that reaches one.
- **Log notifications** (``notifications/message``, level ``notice``, logger ``dsh.jobs``) for
  clients that display them: sent at once on a handshake-era connection, and on a 2026-07-28
  connection on the next ``tools/call`` that opted in to log delivery.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, get_args

import anyio
from mcp import types
from mcp.server.connection import allowed_log_levels
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from dsh.jobs import JobDone, JobRegistry
from dsh.tool_subagent._notice_queue import MAX_NOTICE_CHARS, MAX_NOTICES_PER_RESULT, NoticeQueue
from dsh.tool_subagent._tool import Caller

__all__ = [
    "MAX_NOTICES_PER_RESULT",
    "MAX_NOTICE_CHARS",
    "NOTICE_LEVEL",
    "NOTICE_LOGGER",
    "Notices",
]

logger = logging.getLogger("dsh.tool_subagent.mcp")

NOTICE_LEVEL: types.LoggingLevel = "notice"
NOTICE_LOGGER = "dsh.jobs"
_LEVELS: tuple[str, ...] = get_args(types.LoggingLevel)


def _notice_message(text: str) -> types.LoggingMessageNotification:
    params = types.LoggingMessageNotificationParams(
        level=NOTICE_LEVEL, logger=NOTICE_LOGGER, data=text
    )
    return types.LoggingMessageNotification(params=params)


class Notices:
    """Completion notices of one owner: pushed as log messages, pulled onto tool results."""

    def __init__(self, caller: Caller, jobs: JobRegistry) -> None:
        self._caller = caller
        self._pending: deque[str] = deque()  # for log delivery
        self._queue = NoticeQueue(caller, jobs)
        self._session: ServerSession | None = None
        self._wake = asyncio.Event()
        self.min_level: str = "debug"

    def on_done(self, event: JobDone) -> None:
        if event.notice is None or event.snapshot.owner_session != self._caller.session_id:
            return
        self._pending.append(event.notice)
        self._wake.set()

    def for_result(self) -> str | None:
        """The notices to append to the tool result being returned now (each once), or None."""
        return self._queue.for_result()

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
