"""``ProductRun``: the run base both product providers build their runs on, with the close contract.

A product's run keeps what is its product's (the wire, the mapping of the product's messages to a
result, the teardown of its process tree); the public surface of a ``SubagentRun`` and the close
rules are written here once.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import ClassVar, Protocol, Self

from dsh.subagent._activity import ActivityStamp
from dsh.subagent._closing import CloseOnce
from dsh.subagent._diagnostics import FailureFacts
from dsh.subagent._latch import ResultLatch
from dsh.subagent._types import ResolvedStartRequest, SubagentResult
from dsh.subagent._usage import UsageFacts, UsageWatch
from dsh.subagent.errors import ProductFailure

__all__ = ["ProcessHandle", "ProductRun"]

_log = logging.getLogger("dsh.subagent")


class ProcessHandle(Protocol):
    """What the kit asks of a run's product process (``dsh.subprocess.ManagedProcess`` is one)."""

    def set_busy(self, busy: bool) -> None:
        """Whether the process counts as a run in flight (``nice = "auto"``)."""
        ...

    def kill_now(self) -> object:
        """Kill the whole tree at once, synchronously (no loop to await on)."""
        ...


class ProductRun(abc.ABC):
    """One published (or publishing) one-shot run of a product process.

    A subclass sets ``prefix`` and ``product``, moves ``self._activity`` on every message it reads
    from its product (or points it at the stamp its transport moves), settles ``self._latch``, and
    defines the hooks: ``_stop(aborted)`` (what a cancel does to the product), ``_teardown()``
    (bring the whole tree down, once), ``publish(request)``, ``warm_usable()`` and ``process``; and,
    when its product reports start-up failures with facts, ``startup_failure(error)``.

    The close contract (``aclose()``):

    - It cancels the run first (``cancel()``: the result settles ``aborted`` unless it has settled
      already), then returns only once the whole process tree has exited, or the teardown has
      given up.
    - The teardown runs exactly once (``CloseOnce``), in a task of its own. Every ``aclose()``,
      the first, a concurrent one or a later one, waits for that same teardown and sees its
      outcome: idempotent, and never returning early.
    - A teardown that could not prove the tree's exit raises, to every caller, the safe
      ``ProductFailure`` ``"<prefix>: Product subagent failure (product: <product>; stage:
      teardown; category: unknown)"`` with the raw cause on ``__cause__``.
    - Cancellation: a caller cancelled while waiting keeps waiting (the teardown is bounded by
      the process layer's ladder and is never cut short), then re-raises ``CancelledError``.
    - ``async with run:`` closes it on the way out.

    ``result()`` never raises: it waits for the settlement. Cancelling a task that awaits it
    cancels only that wait, never the run (the latch is an event many may wait on), so it needs no
    ``asyncio.shield`` and leaves no task behind.
    """

    prefix: ClassVar[str]
    """The product's diagnostic prefix, e.g. ``"subagent-codex"``."""
    product: ClassVar[str]
    """The product's display name in failure facts, e.g. ``"Codex"``."""

    def __init__(self) -> None:
        self._id = str(uuid.uuid4())
        self._latch = ResultLatch()
        self._closing = CloseOnce()
        self._closed = asyncio.Event()
        self._activity = ActivityStamp()
        self._first_output: float | None = None
        self._usage: UsageFacts | None = None
        self._usage_watches: list[UsageWatch] = []

    # -- SubagentRun -----------------------------------------------------------------------
    @property
    def id(self) -> str:
        return self._id

    @property
    def last_activity(self) -> float:
        """When the last message was read from the product (``time.monotonic()``)."""
        return self._activity.last

    @property
    def first_activity(self) -> float | None:
        """When the product first reported model output for the task (host-only timing)."""
        return self._first_output

    @property
    def usage(self) -> UsageFacts | None:
        """What the product last reported the run spent (host-only; ``None`` before any report)."""
        return self._usage

    def watch_usage(self, callback: UsageWatch) -> Callable[[], None]:
        """Call ``callback`` on each usage report (:meth:`_report_usage`); returns its remover."""
        self._usage_watches.append(callback)

        def stop() -> None:
            with contextlib.suppress(ValueError):
                self._usage_watches.remove(callback)

        return stop

    def _report_usage(self, usage: UsageFacts) -> None:
        """What the product reported the run spent so far: kept, and told to each watcher."""
        self._usage = usage
        for callback in tuple(self._usage_watches):
            try:
                callback(usage)
            except Exception:
                _log.exception("a usage watcher raised; ignored")

    async def result(self) -> SubagentResult:
        return await self._latch.wait()

    def cancel(self, reason: str | None = None) -> None:
        """Settle ``aborted`` at once unless settled, then stop the product (idempotent)."""
        self._stop(aborted=self._latch.abort())

    async def aclose(self) -> None:
        """Cancel if open; return once the whole tree has exited (see the close contract)."""
        self.cancel()
        teardown = await self._closing.run(self._close_once)
        if teardown is not None:
            raise ProductFailure.from_facts(
                self.prefix, FailureFacts(self.product, "teardown", "unknown")
            ) from teardown

    async def wait_closed(self) -> None:
        """Return once the run has been closed (its teardown ended, whatever its outcome)."""
        await self._closed.wait()

    async def _close_once(self) -> None:
        try:
            await self._teardown()
        finally:
            self._closed.set()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- for the provider template ---------------------------------------------------------
    async def discard(self) -> None:
        """Close a run no request will use (a warm process that is retired or failed to warm)."""
        await self.aclose()

    def startup_failure(self, error: Exception) -> tuple[FailureFacts, BaseException] | None:
        """The facts and raw cause of a start-up failure the product reported, else ``None``
        (the provider's generic start failure is used)."""
        return None

    # -- hooks -----------------------------------------------------------------------------
    @abc.abstractmethod
    def _stop(self, aborted: bool) -> None:
        """What ``cancel()`` does to the product; ``aborted``: this call settled ``aborted``."""

    @abc.abstractmethod
    async def _teardown(self) -> None:
        """Bring the whole process tree down (run once, by ``CloseOnce``); raise if not proven."""

    @abc.abstractmethod
    async def publish(self, request: ResolvedStartRequest) -> None:
        """Send the checked request's task; return once it is delivered (then it is published).

        The request comes whole: its ``texts`` and every field the provider honours.
        """

    @abc.abstractmethod
    def warm_usable(self) -> bool:
        """Whether a warm process may still take a request (ready, untaken, alive)."""

    @property
    @abc.abstractmethod
    def process(self) -> ProcessHandle | None:
        """The product process, once spawned."""
