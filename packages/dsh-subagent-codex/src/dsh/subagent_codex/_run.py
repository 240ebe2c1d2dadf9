"""One Codex run: the app-server process, its wire, the turn state machine and teardown.

``CodexRun`` is the run's public surface (the kit's ``ProductRun``: result, cancel, the close
contract); its parts are its bases, one role each: the turn state and settlement (``_turn``),
teardown (``_teardown``), reading (``_reader``) and the start-up handshake (``_handshake``).
"""

from __future__ import annotations

import asyncio
import contextlib

from dsh.subagent import ResolvedStartRequest
from dsh.subagent.kit import FailureFacts
from dsh.subagent_codex._handshake import Handshake
from dsh.subagent_codex._turn import StartupFailure
from dsh.subagent_codex._wire import WireClosed

__all__ = ["CodexRun"]


class CodexRun(Handshake):
    """A published (or publishing) one-shot Codex run. Create it with ``CodexProvider.start``.

    ``last_activity`` is when the last JSON-RPC frame was read from the app-server;
    ``first_activity`` when the turn's first item other than the echoed prompt was; ``usage`` is
    what Codex last reported the turn spent.
    """

    async def publish(self, request: ResolvedStartRequest) -> None:
        self.begin_turn(request)

    def startup_failure(self, error: Exception) -> tuple[FailureFacts, BaseException] | None:
        if isinstance(error, StartupFailure):
            return (error.facts, error.__cause__ or error)
        return None

    def _stop(self, aborted: bool) -> None:
        """Interrupt the turn (bounded) when this cancel aborted a turn that is under way."""
        if not aborted:
            return
        if self._thread_id is None or self._turn_id is None or self._wire.closed or self._dead:
            return
        params = {"threadId": self._thread_id, "turnId": self._turn_id}
        with contextlib.suppress(WireClosed, RuntimeError):
            loop = asyncio.get_running_loop()
            self._wire.request_cb("turn/interrupt", params, lambda _r, _e: self._wire.close())
            self._interrupt = loop.create_task(self._expire_interrupt())
