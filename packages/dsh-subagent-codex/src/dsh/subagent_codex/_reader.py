"""A Codex run's reading: the app-server's frames, buffered until ``turn/start`` is answered, then
handed to the turn; the server's own requests are answered here.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from typing import Any

from dsh.subagent.kit import UsageFacts
from dsh.subagent_codex._mapping import answer_request, fact_line
from dsh.subagent_codex._teardown import RunTeardown
from dsh.subagent_codex._usage import rate_limit_facts, usage_from_token_usage
from dsh.subagent_codex._wire import ACTIVITY_ONLY, LineTooLong, WireClosed, read_frames

__all__ = ["RunReader"]

_UNSUPPORTED = -32603
_MAX_EARLY_FRAMES = 10_000


def _is_retry_notice(frame: dict[str, Any]) -> bool:
    """An ``error`` notification Codex will retry after: waiting, not activity.

    With no network Codex retries forever by default ("Reconnecting... waiting for network",
    ``unbounded_connection_retries``), sending one such notice per attempt; were they activity,
    the stall limit could never end that run.
    """
    if frame.get("method") != "error":
        return False
    params = frame.get("params")
    return isinstance(params, dict) and params.get("willRetry") is True


def _model_item(params: dict[str, Any]) -> bool:
    """Whether an ``item/*`` notification is the model's (not Codex's echo of the prompt)."""
    item = params.get("item")
    return not (isinstance(item, dict) and item.get("type") == "userMessage")


def _thread_turn(params: Any) -> tuple[Any, Any]:
    if not isinstance(params, dict):
        return (None, None)
    turn_id = params.get("turnId")
    turn = params.get("turn")
    if turn_id is None and isinstance(turn, dict):
        turn_id = turn.get("id")
    return (params.get("threadId"), turn_id)


class RunReader(RunTeardown):
    """The reader task of a Codex run and the dispatch of every frame it reads."""

    # -- reading ---------------------------------------------------------------------------
    async def _read(self) -> None:
        try:
            async for frame in read_frames(self._stdout, self._max_line):
                if not _is_retry_notice(frame):
                    self._activity.touch()
                if self._dead or frame is ACTIVITY_ONLY:
                    continue
                self._dispatch(frame)
        except LineTooLong as exc:
            self._fail(self._stage, cause=exc)
            return
        except (ConnectionError, OSError, ValueError) as exc:
            self._fail(self._stage, cause=exc)
            return
        if self._dead or (self._latch.settled and self._published):
            self._wire.close()
            return
        await self._process_exit()

    async def _process_exit(self) -> None:
        """stdout ended without a terminal: wait (bounded) for the tree, then report the exit."""
        with contextlib.suppress(Exception):
            await self._proc.wait_for_exit(self._grace_s)
        outcome = self._proc.outcome
        if outcome is None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.05):
                    outcome = await self._proc.wait()
        extra: dict[str, Any] = {}
        if outcome is not None:
            extra = {"exit_code": outcome.exit_code, "signal": outcome.signal}
        # Before publication the exit belongs to the start-up step it interrupted (the seeds'
        # stage table: initialize / thread-start reject with the observed process outcome).
        self._fail(self._stage if not self._published else "process", "process-exit", **extra)

    def _dispatch(self, frame: dict[str, Any]) -> None:
        method = frame.get("method")
        if not isinstance(method, str):
            if "id" in frame:
                self._wire.on_response(frame)
            return
        params = frame.get("params")
        thread_id, turn_id = _thread_turn(params)
        if self._early is not None and self._turn_id is None and thread_id == self._thread_id:
            if turn_id is not None:
                if self._early_turn is not None and turn_id != self._early_turn:
                    self._fail("turn-start")
                    return
                self._early_turn = turn_id
            if len(self._early) >= _MAX_EARLY_FRAMES:
                self._fail("turn-start")
                return
            self._early.append(frame)
            return
        self._handle(frame, method, params, thread_id, turn_id)

    def _handle(
        self, frame: dict[str, Any], method: str, params: Any, thread_id: Any, turn_id: Any
    ) -> None:
        if "id" in frame:
            self._server_request(frame["id"], method, params, thread_id, turn_id)
            return
        if method == "account/rateLimits/updated":
            # Account-wide: at 0.163.0 it names no thread or turn (the one process serves this
            # run alone), so it is read on its own, whenever it comes once the thread exists.
            if self._thread_id is not None and isinstance(params, dict):
                self._rate_limits_updated(params)
            return
        if self._turn_id is None or thread_id != self._thread_id or turn_id != self._turn_id:
            return
        assert isinstance(params, dict)
        if self._first_output is None and method.startswith("item/") and _model_item(params):
            self._first_output = self._activity.last
        if method == "item/completed":
            self._item_completed(params.get("item"))
        elif method == "error":
            self._turn_error(params)
        elif method == "turn/completed":
            self._terminal(params.get("turn"))
        elif method == "thread/tokenUsage/updated":
            # Cumulative over the thread; one-shot runs have one turn, so this is the run's.
            # Codex sends one per model response (measured), so their count is the requests'.
            self._usage_reports += 1
            usage = usage_from_token_usage(params, model_requests=self._usage_reports)
            self._report_usage(replace(usage, **self._rate_limits))

    def _rate_limits_updated(self, params: dict[str, Any]) -> None:
        # The account's state, host-side only: kept with the usage facts.
        facts = rate_limit_facts(params)
        if facts:
            self._rate_limits = facts
            self._report_usage(replace(self._usage or UsageFacts(), **facts))

    def _on_turn_started(self, result: dict[str, Any] | None, error: BaseException | None) -> None:
        if self._turn_start_timer is not None:
            self._turn_start_timer.cancel()
        if self._dead:
            return
        turn = result.get("turn") if result else None
        turn_id = turn.get("id") if isinstance(turn, dict) else None
        if error is not None or not isinstance(turn_id, str) or not turn_id:
            self._fail("turn-start", cause=error)
            return
        if self._early_turn is not None and self._early_turn != turn_id:
            self._fail("turn-start")
            return
        self._turn_id = turn_id
        self._stage = "turn"
        early, self._early = self._early or [], None
        for frame in early:
            if self._dead:
                return
            params = frame.get("params")
            thread_id, frame_turn = _thread_turn(params)
            self._handle(frame, frame["method"], params, thread_id, frame_turn)

    # -- server requests -------------------------------------------------------------------
    def _server_request(
        self, request_id: Any, method: str, params: Any, thread_id: Any, turn_id: Any
    ) -> None:
        ours = (
            isinstance(params, dict)
            and thread_id is not None
            and thread_id == self._thread_id
            and (turn_id is None or turn_id == self._turn_id)
        )
        try:
            if not ours:
                raise LookupError(method)
            assert isinstance(params, dict)
            result, request, decision, reason = answer_request(method, params)
        except (LookupError, ValueError) as exc:
            with contextlib.suppress(WireClosed):
                self._wire.respond_error(
                    request_id, _UNSUPPORTED, f'unsupported app-server request "{method}"'
                )
            self._fail(self._stage, cause=exc)
            return
        with contextlib.suppress(WireClosed):
            self._wire.respond(request_id, result)
        self._fact = fact_line(self._mode, request, decision, reason)
