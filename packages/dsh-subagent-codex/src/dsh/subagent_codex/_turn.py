"""A Codex run's state and its turn state machine: the turn's items, its end, and the settlement
(a result, or a failure with its facts). The base of ``CodexRun`` (``_run``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from dsh.subagent import StopReason, SubagentResult, TextBlock, with_limits_hit
from dsh.subagent.kit import FailureFacts, ProductRun, failure_line
from dsh.subagent_codex._auth import AuthPlan
from dsh.subagent_codex._mapping import (
    DECLINED_ITEMS,
    PREFIX,
    PRODUCT,
    classify_error_info,
    fact_line,
)
from dsh.subagent_codex._wire import Wire
from dsh.subprocess import ManagedProcess

__all__ = ["StartupFailure", "TurnState"]

_log = logging.getLogger("dsh.subagent_codex")
_NO_FINAL = "Codex completed without a final answer"
_REJECTED_KEY_STATUSES = frozenset({401, 403})


class StartupFailure(Exception):
    """Internal: a pre-publication failure with its facts (the raw cause is ``__cause__``)."""

    def __init__(self, stage: str, category: str = "unknown", **extra: Any) -> None:
        super().__init__(f"{stage}/{category}")
        self.facts = FailureFacts(PRODUCT, stage, category, **extra)


class TurnState(ProductRun):
    """What one Codex run knows, and how its turn moves on to a settlement."""

    prefix = PREFIX
    product = PRODUCT

    def __init__(
        self,
        proc: ManagedProcess,
        *,
        mode: str,
        grace_s: float,
        max_line: int,
        auth: AuthPlan | None = None,
        private_dir: str | None = None,
    ) -> None:
        super().__init__()
        self._private_dir = private_dir
        self._proc = proc
        assert proc.stdin is not None
        assert proc.stdout is not None
        self._stdout = proc.stdout
        self._wire = Wire(proc.stdin)
        self._mode = mode
        self._auth = auth
        self._grace_s = grace_s
        self._max_line = max_line
        self._stage = "initialize"
        self._published = False
        self._startup_error: StartupFailure | None = None
        self._startup_waiter: asyncio.Future[None] | None = None
        self._thread_id: str | None = None
        self._turn_id: str | None = None
        self._early: list[dict[str, Any]] | None = None
        self._early_turn: Any = None
        self._fact: str | None = None
        self._final: str | None = None
        self._unphased: str | None = None
        self._dead = False
        self._reader: asyncio.Task[None] | None = None
        self._interrupt: asyncio.Task[None] | None = None
        self._turn_start_timer: asyncio.TimerHandle | None = None
        self._usage_reports = 0
        self._rate_limits: dict[str, Any] = {}

    # -- turn ------------------------------------------------------------------------------
    def _item_completed(self, item: Any) -> None:
        if not isinstance(item, dict):
            return
        kind = item.get("type")
        if kind == "agentMessage":
            text = item.get("text")
            if "phase" not in item or not isinstance(text, str):
                self._fail("turn")
                return
            phase = item["phase"]
            if phase == "final_answer":
                self._final = text
            elif phase is None:
                self._unphased = text
            elif phase not in ("commentary", "partial_answer"):
                self._fail("turn")
        elif isinstance(kind, str) and kind in DECLINED_ITEMS and item.get("status") == "declined":
            request, what = DECLINED_ITEMS[kind]
            reason = f"Codex declined {what} under the selected permission mode"
            self._fact = fact_line(self._mode, request, "declined", reason)

    def _turn_error(self, params: dict[str, Any]) -> None:
        """A rejected credential ends the run at its first 401 or 403, not after Codex's retries.

        Codex retries a 401 at the stream level (6 requests over about 6.5 s by default, and its
        retry notices carry the status); no retry can fix a rejected key.
        """
        error = params.get("error")
        info = error.get("codexErrorInfo") if isinstance(error, dict) else None
        _category, http_status = classify_error_info(info)
        if http_status in _REJECTED_KEY_STATUSES:
            self._fail("turn", "unauthorized", http_status=http_status)

    def _answer(self) -> str | None:
        text = self._final if self._final is not None else self._unphased
        return text if text is not None and text.strip() else None

    def _terminal(self, turn: Any) -> None:
        status = turn.get("status") if isinstance(turn, dict) else None
        answer = self._answer()
        if status == "completed" and answer is not None:
            self._settle(SubagentResult(StopReason.COMPLETED, (TextBlock(answer),), None))
        elif status == "completed":
            self._fail("turn", note=_NO_FINAL)
        elif status == "failed":
            assert isinstance(turn, dict)
            error = turn.get("error")
            info = error.get("codexErrorInfo") if isinstance(error, dict) else None
            category, http_status = classify_error_info(info)
            if category == "sandboxError":
                self._fact = fact_line(
                    self._mode, "sandbox execution", "failed", "Codex reported a sandbox failure"
                )
            stop = StopReason.MAX_TOKENS if category == "contextWindowExceeded" else None
            self._fail("turn", category, http_status=http_status, stop=stop)
        else:
            self._fail("turn")
        self._finish_wire()

    def _finish_wire(self) -> None:
        # One-shot: nothing more will be sent, so let Codex start exiting now (saves teardown time).
        self._dead = True
        if self._interrupt is None:
            self._wire.close()

    # -- settlement ------------------------------------------------------------------------
    def _settle(self, result: SubagentResult) -> None:
        self._latch.settle(result)
        self._finish_wire()

    def _fail(
        self,
        stage: str,
        category: str = "unknown",
        *,
        http_status: int | None = None,
        exit_code: int | None = None,
        signal: str | None = None,
        stop: StopReason | None = None,
        note: str | None = None,
        cause: BaseException | None = None,
    ) -> None:
        if self._dead:
            return
        self._dead = True
        if self._turn_start_timer is not None:
            self._turn_start_timer.cancel()
        outcome = self._proc.outcome
        if outcome is not None and exit_code is None and signal is None:
            exit_code, signal = outcome.exit_code, outcome.signal
        facts = FailureFacts(PRODUCT, stage, category, http_status, exit_code, signal)
        facts = with_limits_hit(facts, self._proc.limits_hit)  # dsh ended the tree for a limit
        if cause is not None:
            _log.debug("codex run %s failed at %s", self._id, stage, exc_info=cause)
        if not self._published:
            error = StartupFailure(stage, category)
            error.facts = facts
            error.__cause__ = cause
            self._startup_error = error
            self._wire.close()
            return
        lines = [failure_line(facts)]
        if note is not None:
            lines.append(note)
        if self._fact is not None:
            lines.append(self._fact)
        # Whatever answer Codex completed before the failure is kept as partial output (the
        # same selection as a success: the last final answer, else the last unphased one).
        partial = self._answer()
        output = (TextBlock(partial),) if partial is not None else ()
        result = SubagentResult(stop or StopReason.ERROR, output, "\n".join(lines))
        if self._latch.settle(result):
            _log.info("codex run %s: %s", self._id, lines[0])
        if self._interrupt is None:
            self._wire.close()
