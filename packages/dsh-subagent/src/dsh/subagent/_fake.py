"""``FakeProvider``: a scripted in-process provider for tests of the seam and the layers above."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from types import TracebackType
from typing import Self

from dsh.subagent._activity import ActivityStamp
from dsh.subagent._diagnostics import FailureFacts, failure_line
from dsh.subagent._latch import ResultLatch
from dsh.subagent._types import (
    NO_START_CAPABILITIES,
    Capabilities,
    ResolvedStartRequest,
    StopReason,
    SubagentResult,
    TextBlock,
)
from dsh.subagent._usage import UsageFacts

__all__ = ["FakeProvider", "FakeRun"]

Script = SubagentResult | Callable[[ResolvedStartRequest], SubagentResult]
_ids = itertools.count(1)


def _echo(request: ResolvedStartRequest) -> SubagentResult:
    text = "".join(block.text for block in request.prompt if isinstance(block, TextBlock))
    return SubagentResult(StopReason.COMPLETED, (TextBlock(text),))


class FakeRun:
    """One fake run. It settles its scripted result after ``delay`` seconds (never, for ``None``),
    from a task the run owns, so a ``cancel()`` right after ``start()`` always wins."""

    def __init__(self, provider: FakeProvider, request: ResolvedStartRequest) -> None:
        self.provider = provider
        self.request = request
        self.id = f"fake-{next(_ids)}"
        self.cancel_reasons: list[str | None] = []
        self.closed = False
        self._latch = ResultLatch()
        self._activity = ActivityStamp()
        self._first_output: float | None = None
        self._scripted = provider.script_for(request)
        self._task: asyncio.Task[None] | None = asyncio.create_task(
            self._settle_later(provider.delay), name=f"dsh.subagent fake {self.id}"
        )

    async def _settle_later(self, delay: float | None) -> None:
        if delay is None:
            await asyncio.Event().wait()
        await asyncio.sleep(delay or 0)
        self._activity.touch()  # the scripted "product" answered
        self._first_output = self._first_output or self._activity.last
        self._latch.settle(self._scripted)

    @property
    def last_activity(self) -> float:
        """The activity stamp: the run's creation, then its scripted answer."""
        return self._activity.last

    @property
    def usage(self) -> UsageFacts | None:
        """The provider's ``usage``, reported once the run settled (as a product reports it)."""
        return self.provider.usage if self._latch.settled else None

    @property
    def first_activity(self) -> float | None:
        """When the scripted answer (the "product's" first output) came, if it has."""
        return self._first_output

    def finish(self, result: SubagentResult | None = None) -> bool:
        """Settle now with ``result`` (default: the scripted one); return whether it settled."""
        self._activity.touch()
        self._first_output = self._first_output or self._activity.last
        return self._latch.settle(result if result is not None else self._scripted)

    @property
    def settled(self) -> bool:
        return self._latch.settled

    async def result(self) -> SubagentResult:
        return await self._latch.wait()

    def cancel(self, reason: str | None = None) -> None:
        self.cancel_reasons.append(reason)
        self._latch.abort()
        if self._task is not None:
            self._task.cancel()

    async def aclose(self) -> None:
        if not self._latch.settled:
            self.cancel("closed")
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self.closed = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class FakeProvider:
    """A configurable provider that runs no process.

    - ``result``: a :class:`SubagentResult`, or a callable building one from the request; the
      default echoes the prompt's text as a ``completed`` answer.
    - ``failure``: :class:`FailureFacts` to end every run ``error`` with their failure line as the
      diagnostic (overrides ``result``).
    - ``delay``: seconds until the run settles (``None``: only a cancel or ``FakeRun.finish``
      ends it).
    - ``start_error``: raised by ``start()`` after ``start_delay`` (nothing is published).
    - ``usage``: the :class:`UsageFacts` each run reports once settled (host-only).
    - ``requests`` records every request ``start()`` received; ``runs`` every published run;
      ``open_runs`` those not yet closed.
    """

    def __init__(
        self,
        name: str = "fake",
        *,
        result: Script | None = None,
        failure: FailureFacts | None = None,
        delay: float | None = 0.0,
        start_delay: float = 0.0,
        start_error: BaseException | None = None,
        capabilities: Capabilities = NO_START_CAPABILITIES,
        inherits_parent_context: bool = False,
        usage: UsageFacts | None = None,
    ) -> None:
        self.name = name
        self.capabilities = capabilities
        self.inherits_parent_context = inherits_parent_context
        self.result = result
        self.failure = failure
        self.delay = delay
        self.start_delay = start_delay
        self.start_error = start_error
        self.usage = usage
        self.requests: list[ResolvedStartRequest] = []
        self.runs: list[FakeRun] = []

    def script_for(self, request: ResolvedStartRequest) -> SubagentResult:
        if self.failure is not None:
            return SubagentResult(StopReason.ERROR, (), failure_line(self.failure))
        if self.result is None:
            return _echo(request)
        if isinstance(self.result, SubagentResult):
            return self.result
        return self.result(request)

    @property
    def open_runs(self) -> tuple[FakeRun, ...]:
        return tuple(run for run in self.runs if not run.closed)

    async def start(self, request: ResolvedStartRequest) -> FakeRun:
        self.requests.append(request)
        if self.start_delay:
            await asyncio.sleep(self.start_delay)
        if self.start_error is not None:
            raise self.start_error
        run = FakeRun(self, request)
        self.runs.append(run)
        return run
