"""``CloseOnce``: the one close of a run, shared by every ``aclose()`` caller."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["CloseOnce"]


class CloseOnce:
    """Runs a run's close exactly once and makes every ``aclose()`` wait for its end.

    - The close runs in a task of its own, so a caller's cancellation never interrupts it: a
      second cancel arriving in the middle of a teardown would otherwise cut the teardown short
      (leaving only the process layer's synchronous SIGKILL, without proof of exit).
    - Every caller, concurrent or later, returns only once the close has ended. A caller that is
      cancelled while waiting keeps waiting (the close is bounded by the teardown's own ladder),
      then re-raises ``CancelledError``.
    - The close's exception is kept: :meth:`run` returns it to every caller, so each one can raise
      its own safe failure. A close cancelled from outside (event-loop shutdown) counts as a
      failure too.
    """

    __slots__ = ("_task",)

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None

    async def run(self, close: Callable[[], Coroutine[Any, Any, None]]) -> BaseException | None:
        """Start ``close`` on the first call; wait for it; return its exception (or ``None``)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(close(), name="dsh.subagent close")
        task = self._task
        cancelled: asyncio.CancelledError | None = None
        while not task.done():
            try:
                await asyncio.wait([task])
            except asyncio.CancelledError as error:
                cancelled = cancelled or error
        # Retrieved on every path (a cancelled caller too), so asyncio never logs it as lost.
        if task.cancelled():
            failure: BaseException | None = asyncio.CancelledError("the close was cancelled")
        else:
            failure = task.exception()
        if cancelled is not None:
            raise cancelled
        return failure
