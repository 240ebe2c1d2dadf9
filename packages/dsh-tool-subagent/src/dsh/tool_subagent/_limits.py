"""The caller's limits on one delegation: ``timeout_s`` (wall clock), ``stall_timeout_s``, and
the spend caps ``max_total_tokens``, ``max_output_tokens`` and ``max_cost_usd``.

One timer per time limit and run, on the event loop; no task and no per-message work. The
stall timer, when it fires, compares the clock with the run's activity stamp
(``dsh.subagent.kit.last_activity``) and re-arms itself for the stamp plus the limit, so a run
that keeps talking costs one timer callback per ``stall_timeout_s``. An expired limit cancels
the run through its own ``cancel()``; the caller then closes it as usual (``aclose()``:
whole-tree exit), so the tree is gone before the caller reports the limit. The spend caps are
checked on each usage report of the run (``dsh.subagent.kit.watch_usage``: once per model
response), and once more on the facts the result carries. docs/liveness.md states the contract.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from dsh.subagent import SubagentRun, UsageFacts
from dsh.subagent.kit import last_activity, watch_usage

__all__ = [
    "CAP_FIELDS",
    "DEFAULT_MAX_TOTAL_TOKENS",
    "DEFAULT_STALL_TIMEOUT_S",
    "DEFAULT_TIMEOUT_S",
    "RunLimits",
    "Watchdog",
    "limit_text",
    "spent",
]

logger = logging.getLogger("dsh.tool_subagent")
_WARNED: set[str] = set()

DEFAULT_STALL_TIMEOUT_S = 900.0
"""15 minutes: the longest silence a shipped product's own tool allows (Claude Code's Bash tool,
10 minutes) plus room for a slow first token (docs/decisions.md, "Default stall limit")."""
DEFAULT_TIMEOUT_S: float | None = None
"""No wall-clock limit by default: a long task that keeps working is legitimate."""
DEFAULT_MAX_TOTAL_TOKENS = 50_000_000
"""The default spend bound: a run whose model keeps working (an endless tool loop) stops here.
Generous on purpose (docs/liveness.md, "The defaults, and why"): about 200 model requests at a
full 250,000-token context, many more at a typical one."""

#: The spend caps, in the order they are checked.
CAP_FIELDS = ("max_total_tokens", "max_output_tokens", "max_cost_usd")


def _seconds(value: float) -> str:
    return f"{value:g}"


def _amount(value: float) -> str:
    """A cap as given: a whole number in full (``50000000``, never ``5e+07``), else ``2.5``."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def spent(usage: UsageFacts, field: str) -> float | None:
    """What ``usage`` says was spent against the cap ``field``; ``None``: the product said nothing.

    Total tokens are the product's own total when it states one (Codex), else the sum of the
    parts it states (Claude Code: input, cache reads, cache writes and output, the same tokens
    Codex's total counts).
    """
    if field == "max_output_tokens":
        return usage.output_tokens
    if field == "max_cost_usd":
        return usage.cost_usd
    if usage.total_tokens is not None:
        return usage.total_tokens
    parts = (
        usage.input_tokens,
        usage.cached_input_tokens,
        usage.cache_creation_input_tokens,
        usage.output_tokens,
    )
    known = [part for part in parts if part is not None]
    return sum(known) if known else None


def limit_text(field: str, value: float) -> str:
    """The fixed, model-safe text of an expired limit (it names the limit and its value only)."""
    if field == "max_total_tokens":
        return f"subagent run stopped: {_amount(value)} tokens spent ({field})"
    if field == "max_output_tokens":
        return f"subagent run stopped: {_amount(value)} output tokens spent ({field})"
    if field == "max_cost_usd":
        return f"subagent run stopped: {_amount(value)} USD spent ({field})"
    seconds = value
    if field == "stall_timeout_s":
        return f"subagent run stopped: no product activity for {_seconds(seconds)} s ({field})"
    return f"subagent run stopped: wall-clock limit of {_seconds(seconds)} s reached ({field})"


@dataclass(frozen=True, slots=True)
class RunLimits:
    """A delegation tool's limits; ``None`` means no such limit."""

    timeout_s: float | None = DEFAULT_TIMEOUT_S
    stall_timeout_s: float | None = DEFAULT_STALL_TIMEOUT_S
    max_total_tokens: int | None = DEFAULT_MAX_TOTAL_TOKENS
    max_output_tokens: int | None = None
    max_cost_usd: float | None = None

    def crossed(self, usage: UsageFacts | None) -> tuple[str, float] | None:
        """The first spend cap ``usage`` has reached (its field and value), or ``None``."""
        if usage is None:
            return None
        for field in CAP_FIELDS:
            cap = getattr(self, field)
            if cap is not None and (amount := spent(usage, field)) is not None and amount >= cap:
                return field, cap
        return None

    @property
    def caps(self) -> bool:
        """Whether any spend cap is set."""
        return any(getattr(self, field) is not None for field in CAP_FIELDS)

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
        self._unwatch = watch_usage(run, self._on_usage) if limits.caps else None
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

    def _expire(self, field: str, value: float) -> None:
        if self.expired is not None:
            return
        self.field = field
        self.expired = limit_text(field, value)
        logger.info("subagent run %s: %s reached (%s)", self._run.id, field, value)
        self.stop()
        self._run.cancel(self.expired)

    def _on_usage(self, usage: UsageFacts) -> None:
        crossed = self._limits.crossed(usage)
        if crossed is not None:
            self._expire(*crossed)

    def settle(self, usage: UsageFacts | None) -> None:
        """The final check on the facts the settled run reports (a product that reports its
        spend only with its result, or stopped itself at its own cap): names the cap reached."""
        crossed = self._limits.crossed(usage)
        if self.expired is None and crossed is not None:
            self.field, self.expired = crossed[0], limit_text(*crossed)

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
        """Disarm both timers and the usage watch (idempotent); the run settled or the caller is
        closing it."""
        for handle in (self._deadline_handle, self._stall_handle):
            if handle is not None:
                handle.cancel()
        self._deadline_handle = self._stall_handle = None
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
