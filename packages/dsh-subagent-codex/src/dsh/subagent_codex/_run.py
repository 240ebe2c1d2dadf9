"""One Codex run: the app-server process, its wire, the turn state machine and teardown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from types import TracebackType
from typing import Any, Self

from dsh.subagent import ProductFailure, StopReason, SubagentResult, TextBlock, with_limits_hit
from dsh.subagent.kit import (
    ActivityStamp,
    CloseOnce,
    FailureFacts,
    ResultLatch,
    UsageFacts,
    failure_line,
    remove_off_loop,
)
from dsh.subagent_codex._auth import AuthPlan, login_stamp
from dsh.subagent_codex._mapping import (
    DECLINED_ITEMS,
    PREFIX,
    PRODUCT,
    answer_request,
    classify_error_info,
    fact_line,
)
from dsh.subagent_codex._usage import usage_from_token_usage
from dsh.subagent_codex._wire import (
    ACTIVITY_ONLY,
    LineTooLong,
    RpcError,
    Wire,
    WireClosed,
    read_frames,
)
from dsh.subprocess import ManagedProcess, TeardownError, current_trace_context

__all__ = ["CodexRun", "StartupFailure"]

_log = logging.getLogger("dsh.subagent_codex")
_INTERRUPT_TIMEOUT_S = 1.0
_UNSUPPORTED = -32603
_MAX_EARLY_FRAMES = 10_000
_NO_FINAL = "Codex completed without a final answer"
_LOCAL_REPLY_S = 30.0
"""How long an account exchange may take (Codex answers from its own state in milliseconds)."""
_REJECTED_KEY_STATUSES = frozenset({401, 403})
_TURN_START_REPLY_S = 30.0
"""How long the ``turn/start`` reply may take. Codex answers it at once (in milliseconds, before
the model is called), but it drops a request it cannot deserialize without any answer, and the
run would then wait at ``turn-start`` forever. This bounds one protocol exchange, not the run:
the turn itself still has no wall-clock limit of ours."""


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


class StartupFailure(Exception):
    """Internal: a pre-publication failure with its facts (the raw cause is ``__cause__``)."""

    def __init__(self, stage: str, category: str = "unknown", **extra: Any) -> None:
        super().__init__(f"{stage}/{category}")
        self.facts = FailureFacts(PRODUCT, stage, category, **extra)


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


class CodexRun:
    """A published (or publishing) one-shot Codex run. Create it with ``CodexProvider.start``."""

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
        self._id = str(uuid.uuid4())
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
        self._latch = ResultLatch()
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
        self._closing = CloseOnce()
        self._activity = ActivityStamp()
        self._first_output: float | None = None
        self._usage: UsageFacts | None = None
        self._usage_reports = 0

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

    # -- startup (driven by the provider) --------------------------------------------------
    async def initialize(self, client_info: dict[str, Any], capabilities: dict[str, Any]) -> None:
        """initialize → initialized: all a warm process does before a request takes it."""
        self._reader = asyncio.get_running_loop().create_task(self._read())
        init = await self._call(
            "initialize", {"clientInfo": client_info, "capabilities": capabilities}
        )
        if init is None:
            raise StartupFailure("initialize")
        self._send_or_fail(lambda: self._wire.notify("initialized"))
        self._stage = "thread-start"

    async def authenticate(self, login_key: str | None) -> None:
        """``account/read``; log ``login_key`` in when an OpenAI account is required and missing.

        Raises ``StartupFailure("auth", "unauthorized")`` when one is required and there is no
        account and no key: an unauthenticated turn would wait forever (see ``_auth``).
        """
        self._stage = "auth"
        state = await self._call_bounded("account/read", {"refreshToken": True})
        if state is None:
            raise StartupFailure("auth")
        if state.get("account") is not None or state.get("requiresOpenaiAuth") is not True:
            self._stage = "thread-start"
            return
        if not login_key:
            raise StartupFailure("auth", "unauthorized")
        login = {"type": "apiKey", "apiKey": login_key}
        reply = await self._call_bounded("account/login/start", login)
        if reply is None or reply.get("type") != "apiKey":
            raise StartupFailure("auth", "unauthorized")
        self._stage = "thread-start"

    async def _call_bounded(self, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """``_call`` for an exchange Codex answers locally: a silent product cannot hold it."""
        try:
            async with asyncio.timeout(_LOCAL_REPLY_S):
                return await self._call(method, params)
        except TimeoutError as exc:
            raise StartupFailure(self._stage, "timeout") from exc

    def warm_usable(self) -> bool:
        """Thread started, not taken, and nothing has ended it since (a warm process's check)."""
        return (
            self._thread_id is not None
            and not self._published
            and not self._dead
            and not self._wire.closed
            and self._proc.outcome is None
            and (self._auth is None or login_stamp(self._auth.home) == self._auth.stamp)
        )

    @property
    def process(self) -> ManagedProcess:
        return self._proc

    async def start_thread(self, thread: dict[str, Any]) -> None:
        """thread/start after ``initialize``; raise ``StartupFailure`` on any problem."""
        if self._startup_error is not None:
            raise self._startup_error
        started = await self._call("thread/start", thread)
        thread_obj = started.get("thread") if started else None
        thread_id = thread_obj.get("id") if isinstance(thread_obj, dict) else None
        if (
            not isinstance(thread_id, str)
            or not thread_id
            or not isinstance(thread_obj, dict)
            or thread_obj.get("ephemeral") is not True
        ):
            raise StartupFailure("thread-start")
        if self._startup_error is not None:
            # The reader failed on a frame that arrived in the same read as this reply.
            raise self._startup_error
        self._thread_id = thread_id

    def begin_turn(self, texts: list[str]) -> None:
        """Publish: send ``turn/start``; its reply and early frames are handled by the reader."""
        self._published = True
        self._stage = "turn-start"
        self._early = []
        params = {
            "threadId": self._thread_id,
            "input": [{"type": "text", "text": text, "text_elements": []} for text in texts],
        }
        try:
            # The turn continues the delegation's trace when one is current (docs/observability.md).
            trace = current_trace_context()
            self._wire.request_cb("turn/start", params, self._on_turn_started, trace)
        except WireClosed as exc:
            self._fail("turn-start", cause=exc)
            return
        self._turn_start_timer = asyncio.get_running_loop().call_later(
            _TURN_START_REPLY_S, self._turn_start_unanswered
        )

    def _turn_start_unanswered(self) -> None:
        if self._turn_id is None:
            self._fail("turn-start", cause=TimeoutError("no turn/start reply"))

    async def rollback(self) -> None:
        """Bring the partial process tree to exit (startup failure or cancellation).

        Raises the teardown's own exception (a ``TeardownError``) when exit was not proven.
        """
        self._latch.abort()
        teardown = await self._closing.run(self._teardown)
        if isinstance(teardown, TeardownError):
            raise teardown
        if teardown is not None:
            raise TeardownError("process teardown failed") from teardown

    async def _call(self, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        stage = self._stage
        try:
            return await self._wire.request(method, params)
        except (RpcError, WireClosed) as exc:
            if self._startup_error is not None:
                raise self._startup_error from exc
            raise StartupFailure(stage) from exc

    def _send_or_fail(self, send: Any) -> None:
        try:
            send()
        except WireClosed as exc:
            raise StartupFailure(self._stage) from exc

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
            self._usage = usage_from_token_usage(params, model_requests=self._usage_reports)

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
