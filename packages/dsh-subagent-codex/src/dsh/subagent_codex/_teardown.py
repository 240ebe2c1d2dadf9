"""A Codex run's teardown: the bounded interrupt, the whole tree's exit, the private home's
removal."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from dsh.subagent.kit import FailureFacts, failure_line, remove_off_loop
from dsh.subagent_codex._mapping import PREFIX, PRODUCT
from dsh.subagent_codex._turn import TurnState

__all__ = ["RunTeardown"]

_log = logging.getLogger("dsh.subagent_codex")
_INTERRUPT_TIMEOUT_S = 1.0


class RunTeardown(TurnState):
    """Bringing a Codex run's process tree down, once (``CloseOnce`` runs it)."""

    # -- teardown --------------------------------------------------------------------------
    async def _expire_interrupt(self) -> None:
        # The interrupt is never awaited unbounded: after a short while the wire closes anyway.
        await asyncio.sleep(_INTERRUPT_TIMEOUT_S)
        self._wire.close()

    async def _teardown(self) -> None:
        self._dead = True
        self._wire.close()
        try:
            await self._proc.aclose()
        except Exception:
            _log.warning(
                "%s: %s", PREFIX, failure_line(FailureFacts(PRODUCT, "teardown", "unknown"))
            )
            _log.debug("codex run %s teardown failed", self._id, exc_info=True)
            raise
        finally:
            for task in (self._interrupt, self._reader):
                if task is not None and not task.done():
                    task.cancel()
            for task in (self._interrupt, self._reader):
                if task is not None:
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            await self._remove_private_dir()

    async def _remove_private_dir(self) -> None:
        """The private home goes once the tree is down (or its teardown has given up)."""
        if self._private_dir is not None:
            path, self._private_dir = self._private_dir, None
            await remove_off_loop(path)
