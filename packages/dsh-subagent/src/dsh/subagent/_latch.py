"""``ResultLatch``: the result cell both product providers settle."""

from __future__ import annotations

import asyncio

from dsh.subagent._types import StopReason, SubagentResult

__all__ = ["ResultLatch"]

_ABORTED = SubagentResult(StopReason.ABORTED, (), None)


class ResultLatch:
    """A write-once result cell: the first settlement wins and later ones are refused.

    A local cancel calls :meth:`abort`, which wins over every result that has not been settled yet
    (a queued answer, an iterator that ends normally, an answer arriving at the same moment):
    providers settle from their reading task, while ``cancel()`` aborts synchronously.

    The latch may be created outside a running event loop. :meth:`wait` may be awaited by many
    tasks at once; cancelling one of them does not affect the latch.
    """

    __slots__ = ("_event", "_result")

    def __init__(self) -> None:
        self._result: SubagentResult | None = None
        self._event = asyncio.Event()

    def settle(self, result: SubagentResult) -> bool:
        """Settle with ``result`` unless already settled; return whether this call settled it.

        The diagnostic is bounded with ``bound_diagnostic`` and dropped on ``completed`` results
        (``SubagentResult`` does both on construction).
        """
        if self._result is not None:
            return False
        if not isinstance(result, SubagentResult):
            raise TypeError("ResultLatch.settle() takes a SubagentResult")
        self._result = result
        self._event.set()
        return True

    def abort(self) -> bool:
        """Settle ``aborted`` with empty output and no diagnostic, unless already settled."""
        return self.settle(_ABORTED)

    @property
    def settled(self) -> bool:
        return self._result is not None

    @property
    def result_if_settled(self) -> SubagentResult | None:
        return self._result

    async def wait(self) -> SubagentResult:
        """Wait for the settlement and return it."""
        if self._result is None:
            await self._event.wait()
        assert self._result is not None
        return self._result
