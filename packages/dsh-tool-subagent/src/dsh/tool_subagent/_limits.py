"""The caller's limits on one delegation: ``timeout_s`` (wall clock) and ``stall_timeout_s``.

One timer per limit and run, on the event loop; no task and no per-message work. The stall timer,
when it fires, compares the clock with the run's activity stamp (``dsh.subagent.kit.last_activity``)
and re-arms itself for the stamp plus the limit, so a run that keeps talking costs one timer
callback per ``stall_timeout_s``. An expired limit cancels the run through its own ``cancel()``;
the caller then closes it as usual (``aclose()``: whole-tree exit), so the tree is gone before the
caller reports the limit. docs/liveness.md states the contract.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from dsh.subagent import SubagentRun
from dsh.subagent.kit import last_activity

__all__ = [
    "DEFAULT_STALL_TIMEOUT_S",
    "DEFAULT_TIMEOUT_S",
    "RunLimits",
    "Watchdog",
    "limit_text",
]

logger = logging.getLogger("dsh.tool_subagent")
_WARNED: set[str] = set()

DEFAULT_STALL_TIMEOUT_S = 900.0
"""15 minutes: the longest silence a shipped product's own tool allows (Claude Code's Bash tool,
10 minutes) plus room for a slow first token (docs/decisions.md, "Default stall limit")."""
DEFAULT_TIMEOUT_S: float | None = None
"""No wall-clock limit by default: a long task that keeps working is legitimate."""


def _seconds(value: float) -> str:
    return f"{value:g}"


def limit_text(field: str, seconds: float) -> str:
    """The fixed, model-safe text of an expired limit (it names the limit and its value only)."""
    if field == "stall_timeout_s":
        return f"subagent run stopped: no product activity for {_seconds(seconds)} s ({field})"
    return f"subagent run stopped: wall-clock limit of {_seconds(seconds)} s reached ({field})"


@dataclass(frozen=True, slots=True)
class RunLimits:
    """A delegation tool's limits; ``None`` means no such limit."""

    timeout_s: float | None = DEFAULT_TIMEOUT_S
    stall_timeout_s: float | None = DEFAULT_STALL_TIMEOUT_S

    def start_deadline(self, began: float) -> float | None:
        """The loop-time deadline of the wall-clock limit for a run that began at ``began``."""
        return None if self.timeout_s is None else began + self.timeout_s


class Watchdog:
    """Watches one published run until :meth:`stop`; ``expired`` is the text of the limit hit.

    ``run`` is any :class:`~dsh.subagent.SubagentRun` (the service's ``PublishedRun`` in the
    tool; a provider's own run in the benchmark).

    ``began`` is the ``loop.time()`` the delegation began (the wall-clock limit counts the start
    too). The stall clock starts at publication: a warm process's stamp can be older than the
    run, so the silence is measured from the later of the stamp and the publication.
    """

    def __init__(self, run: SubagentRun, limits: RunLimits, began: float) -> None:
        self._run = run
        self._limits = limits
        self._loop = asyncio.get_running_loop()
        self.expired: str | None = None
        self.field: str | None = None
        self._deadline_handle: asyncio.TimerHandle | None = None
        self._stall_handle: asyncio.TimerHandle | None = None
        # The stamp is time.monotonic(); the loop's clock is too (asyncio's default), but the
        # offset keeps this right for a loop with its own clock.
        self._offset = self._loop.time() - time.monotonic()
        self._published = self._loop.time()
        deadline = limits.start_deadline(began)
        if deadline is not None:
            self._deadline_handle = self._loop.call_at(deadline, self._on_deadline)
        stall = limits.stall_timeout_s
        if stall is not None:
            if last_activity(run) is None:
                provider = str(getattr(run, "provider", "?"))
                if provider not in _WARNED:
                    _WARNED.add(provider)
                    logger.warning(
                        'subagent provider "%s" reports no product activity; stall_timeout_s'
                        " cannot apply to its runs (timeout_s still does)",
                        provider,
                    )
            else:
                self._stall_handle = self._loop.call_at(self._published + stall, self._on_stall)

    def _expire(self, field: str, seconds: float) -> None:
        if self.expired is not None:
            return
        self.field = field
        self.expired = limit_text(field, seconds)
        logger.info("subagent run %s: %s expired after %s s", self._run.id, field, seconds)
        self.stop()
        self._run.cancel(self.expired)

    def _on_deadline(self) -> None:
        self._deadline_handle = None
        assert self._limits.timeout_s is not None
        self._expire("timeout_s", self._limits.timeout_s)

    def _on_stall(self) -> None:
        self._stall_handle = None
        stall = self._limits.stall_timeout_s
        assert stall is not None
        stamp = last_activity(self._run)
        since = self._published if stamp is None else max(stamp + self._offset, self._published)
        now = self._loop.time()
        if now - since >= stall:
            self._expire("stall_timeout_s", stall)
        else:
            self._stall_handle = self._loop.call_at(since + stall, self._on_stall)

    def stop(self) -> None:
        """Disarm both timers (idempotent); the run settled or the caller is closing it."""
        for handle in (self._deadline_handle, self._stall_handle):
            if handle is not None:
                handle.cancel()
        self._deadline_handle = self._stall_handle = None
