"""One Codex run: the app-server process, its wire, the turn state machine and teardown.

``CodexRun`` is the run's public surface; its parts are its bases, one role each: the turn state
and settlement (``_turn``), teardown (``_teardown``), reading (``_reader``) and the start-up
handshake (``_handshake``).
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import Self

from dsh.subagent import ProductFailure, SubagentResult
from dsh.subagent.kit import FailureFacts, UsageFacts
from dsh.subagent_codex._handshake import Handshake
from dsh.subagent_codex._mapping import PREFIX, PRODUCT
from dsh.subagent_codex._wire import WireClosed

__all__ = ["CodexRun"]


class CodexRun(Handshake):
    """A published (or publishing) one-shot Codex run. Create it with ``CodexProvider.start``."""

    # -- public surface --------------------------------------------------------------------
    @property
    def id(self) -> str:
        return self._id

    @property
    def last_activity(self) -> float:
        """When the last JSON-RPC frame was read from the app-server (``time.monotonic()``)."""
        return self._activity.last

    @property
    def first_activity(self) -> float | None:
        """When the turn's first item other than the echoed prompt was read (host-only timing)."""
        return self._first_output

    @property
    def usage(self) -> UsageFacts | None:
        """What Codex last reported the turn spent (host-only; ``None`` before any report)."""
        return self._usage

    async def result(self) -> SubagentResult:
        return await self._latch.wait()

    def cancel(self, reason: str | None = None) -> None:
        if not self._latch.abort():
            return
        if self._thread_id is None or self._turn_id is None or self._wire.closed or self._dead:
            return
        params = {"threadId": self._thread_id, "turnId": self._turn_id}
        with contextlib.suppress(WireClosed, RuntimeError):
            loop = asyncio.get_running_loop()
            self._wire.request_cb("turn/interrupt", params, lambda _r, _e: self._wire.close())
            self._interrupt = loop.create_task(self._expire_interrupt())

    async def aclose(self) -> None:
        """Cancel if open; return once the whole tree has exited (every caller, see CloseOnce)."""
        self.cancel()
        teardown = await self._closing.run(self._teardown)
        if teardown is not None:
            raise ProductFailure.from_facts(
                PREFIX, FailureFacts(PRODUCT, "teardown", "unknown")
            ) from teardown

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
