"""The ``tools/call`` runs of one MCP connection: progress, cancellation and close.

Each call runs in a task of its own. The SDK cancels a request handler through an anyio cancel
scope, which re-delivers the cancellation at every ``await``; a delegation's cleanup
(``run.aclose()``, which returns after whole-tree exit) would be interrupted by it. Here the
handler cancels the call's task exactly once and waits for it shielded, so the run's process
tree has exited before the handler ends, whether the client sent ``notifications/cancelled``
or the server is stopping.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp.server.context import ServerRequestContext

from dsh.jobs.tools import ToolResult

__all__ = ["CLOSED_TEXT", "PROGRESS_INTERVAL_S", "Calls", "progress_message"]

logger = logging.getLogger("dsh.tool_subagent.mcp")

#: How often a call whose request carried a ``progressToken`` reports progress.
PROGRESS_INTERVAL_S = 5.0
#: The result of a call that was still running when the client closed the connection.
CLOSED_TEXT = "the call was cancelled: the MCP client closed the connection"


def progress_message(tool_name: str, elapsed_s: float) -> str:
    """The ``message`` of a progress notification (no product reports a phase to dsh)."""
    return f"{tool_name}: running, {elapsed_s:.0f} s elapsed"


def _wants_progress(ctx: ServerRequestContext[Any, Any]) -> bool:
    meta = ctx.meta or {}
    return meta.get("progress_token") is not None


class Calls:
    """The in-flight ``tools/call`` runs of one connection."""

    def __init__(self, progress_interval_s: float = PROGRESS_INTERVAL_S) -> None:
        if progress_interval_s <= 0:
            raise ValueError("progress_interval_s must be > 0")
        self._interval = progress_interval_s
        self._tasks: set[asyncio.Task[ToolResult]] = set()  # calls that may run long
        self._closing = False

    @property
    def active(self) -> int:
        return len(self._tasks)

    def close(self) -> None:
        """The client closed the connection: cancel every running long call (each answers
        with :data:`CLOSED_TEXT` once its run's tree has exited) and refuse new ones. Quick
        calls (``long=False``) finish by themselves."""
        self._closing = True
        for task in tuple(self._tasks):
            task.cancel(CLOSED_TEXT)

    async def run(
        self,
        ctx: ServerRequestContext[Any, Any],
        tool_name: str,
        call: Callable[[], Awaitable[ToolResult]],
        *,
        long: bool = True,
    ) -> ToolResult:
        """Run ``call`` to its result, reporting progress if the request asked for it.

        ``long`` marks a call that may wait on a product (a delegation, a waiting
        ``job_output``): :meth:`close` cancels those.
        """
        if self._closing and long:
            return ToolResult(text=CLOSED_TEXT, is_error=True)
        task: asyncio.Task[ToolResult] = asyncio.ensure_future(call())
        if long:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        interval = self._interval if _wants_progress(ctx) else None
        started = time.monotonic()
        try:
            while not (await asyncio.wait({task}, timeout=interval))[0]:
                await self._report(ctx, tool_name, time.monotonic() - started)
        except BaseException:
            # The request was cancelled (notifications/cancelled) or the server is stopping.
            task.cancel("the MCP request was cancelled")
            with anyio.CancelScope(shield=True):
                await asyncio.wait({task})
            raise
        if task.cancelled():
            return ToolResult(text=CLOSED_TEXT, is_error=True)
        return task.result()

    @staticmethod
    async def _report(ctx: ServerRequestContext[Any, Any], tool_name: str, elapsed: float) -> None:
        try:
            await ctx.session.report_progress(
                round(elapsed, 3), None, progress_message(tool_name, elapsed)
            )
        except Exception:
            logger.debug("a progress notification could not be sent", exc_info=True)
