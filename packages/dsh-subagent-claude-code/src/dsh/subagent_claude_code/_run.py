"""One published Claude Code run: the consuming task, the latch, cancel-wins, teardown."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    CLIConnectionError,
    PermissionResultAllow,
    PermissionResultDeny,
    ProcessError,
    RateLimitEvent,
    ResultMessage,
    StreamEvent,
    SystemMessage,
    ToolPermissionContext,
    query,
)

from dsh.subagent import (
    STRUCTURED_OUTPUT_CATEGORY,
    ResolvedStartRequest,
    StopReason,
    SubagentResult,
    TextBlock,
    with_limits_hit,
)
from dsh.subagent.kit import FailureFacts, ProductRun, UsageFacts, failure_line, remove_off_loop
from dsh.subagent_claude_code._mapping import (
    DENY_MESSAGE,
    PREFIX,
    PRODUCT,
    REASON_CALLBACK,
    REASON_DIALOG,
    REASON_ELICITATION,
    REASON_PRODUCT,
    REQUEST_DIALOG,
    REQUEST_ELICITATION,
    REQUEST_TOOL,
    PermissionFact,
    fact_line,
    is_strict_success,
    result_facts,
    structured_answer,
)
from dsh.subagent_claude_code._transport import DshTransport
from dsh.subagent_claude_code._usage import StreamedUsage, rate_limit_facts, usage_from_result
from dsh.subagent_claude_code.config import ClaudeCodeProviderConfig
from dsh.subprocess import ManagedProcess, SpawnSpec, SubprocessRuntime

__all__ = ["WARM_INITIALIZE", "ClaudeCodeRun", "StartupExit"]

_log = logging.getLogger("dsh.subagent_claude_code")

_CONSUMER_STOP_S = 2.0
"""After whole-tree exit, how long the SDK generator may take to end before it is cancelled."""


WARM_INITIALIZE: dict[str, Any] = {"subtype": "initialize", "hooks": None}
"""The ``initialize`` request the SDK's ``query()`` sends for this provider's options (no hooks,
agents, skills or system-prompt preset); a warm process sends it ahead of its run, and
tests/test_warm.py pins it against what the SDK really writes."""


class StartupExit(Exception):
    """The CLI ended (or the SDK failed) before the prompt was delivered."""


class ClaudeCodeRun(ProductRun):
    """A run whose CLI is live and whose prompt has been delivered (see ``start()``).

    ``last_activity`` is when the last stdout line was read from the CLI; ``first_activity``
    when the first assistant message was; ``usage`` what Claude Code's result reported.
    """

    prefix = PREFIX
    product = PRODUCT

    def __init__(
        self,
        config: ClaudeCodeProviderConfig,
        spec: SpawnSpec,
        runtime: SubprocessRuntime,
        tmp_dir: str | None,
    ) -> None:
        super().__init__()
        self._config = config
        self._mode = config.permission_mode
        self._tmp_dir = tmp_dir
        self._fact: PermissionFact | None = None
        # The request set an output schema: the answer is the result's structured_output.
        self._structured = False
        self._startup: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._transport = DshTransport(
            spec,
            runtime,
            on_control=self._on_control,
            on_spawned=self._on_spawned,
            on_prompt_sent=self._on_prompt_sent,
        )
        self._activity = self._transport.activity
        self._task: asyncio.Task[None] | None = None
        self._exit_watch: asyncio.Task[None] | None = None
        self._dispose: asyncio.TimerHandle | None = None
        self._error: BaseException | None = None
        self._warm = False
        # Distinct API message ids seen: one per model request the CLI made.
        self._message_ids: set[str] = set()
        self._streamed = StreamedUsage()
        # The account's rate-limit state as the last ``rate_limit_event`` stated it.
        self._rate_limits: dict[str, Any] = {}

    # ---- ProductRun ---------------------------------------------------------------------

    def _report_usage(self, usage: UsageFacts) -> None:
        # The rate-limit facts come apart from the spend; every report carries the last ones.
        super()._report_usage(dataclasses.replace(usage, **self._rate_limits))

    def _stop(self, aborted: bool) -> None:
        """Start the SIGTERM-first ladder (also when the result had settled already)."""
        self._transport.terminate()

    async def publish(self, request: ResolvedStartRequest) -> None:
        """Send the task through the SDK's query; return once the prompt is delivered."""
        self._structured = request.output_schema is not None
        self.begin(request.texts)
        await self.wait_ready()

    def startup_failure(self, error: Exception) -> tuple[FailureFacts, BaseException] | None:
        if isinstance(error, StartupExit):
            return (self.startup_facts(), self.startup_cause or error)
        return None

    # ---- startup (driven by the provider) -------------------------------------------------

    async def spawn(self) -> None:
        """Spawn the CLI in the task running ``start()``.

        The SDK's ``query()`` would connect the transport from the consuming task, where a
        cancellation of ``start()`` cannot stop it: the CLI would start (and call the model) after
        the cancel. Connected here, ``query()``'s own ``connect()`` finds the process and returns.
        """
        await self._transport.connect()

    async def preinitialize(self) -> None:
        """A warm process: the CLI's ``initialize`` control exchange, before any request."""
        await self._transport.preinitialize(dict(WARM_INITIALIZE))
        self._warm = True

    def warm_usable(self) -> bool:
        """Initialised, not yet taken, and nothing has ended it since (a warm process's check)."""
        process = self._transport.process
        return (
            self._warm
            and self._task is None
            and not self._startup.done()
            and not self._transport.stopped_by_us
            and process is not None
            and process.outcome is None
        )

    @property
    def process(self) -> ManagedProcess | None:
        return self._transport.process

    async def discard(self) -> None:
        """Close a warm process that no request took (idle death, key change, provider close)."""
        try:
            await self.aclose()
        finally:
            if self._startup.done() and not self._startup.cancelled():
                self._startup.exception()  # retrieved: nobody else will

    def begin(self, texts: Sequence[str]) -> None:
        can_use_tool = None if self._mode == "bypassPermissions" else self._can_use_tool
        options = ClaudeAgentOptions(can_use_tool=can_use_tool)
        prompt = _one_user_message(texts)
        messages = query(prompt=prompt, options=options, transport=self._transport)
        self._task = asyncio.get_running_loop().create_task(self._consume(messages))
        self._task.add_done_callback(self._on_consumer_done)

    async def wait_ready(self) -> None:
        """Return once the prompt is delivered; raise ``StartupExit`` if the run ended first."""
        await asyncio.shield(self._startup)

    def startup_facts(self) -> FailureFacts:
        outcome = self._transport.outcome
        if outcome is not None and not self._transport.stopped_by_us and outcome.exit_code != 0:
            return FailureFacts(
                product=PRODUCT,
                stage="query-start",
                category="process-exit",
                exit_code=outcome.exit_code,
                signal=outcome.signal,
            )
        return FailureFacts(product=PRODUCT, stage="query-start", category="unknown")

    @property
    def startup_cause(self) -> BaseException | None:
        return self._error

    # ---- callbacks ------------------------------------------------------------------------

    def _record(self, request: str, decision: str, reason: str) -> None:
        self._fact = PermissionFact(request, decision, reason)

    async def _can_use_tool(
        self, tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResultAllow | PermissionResultDeny:
        self._record(REQUEST_TOOL, "denied", REASON_CALLBACK)
        return PermissionResultDeny(message=DENY_MESSAGE)

    def _on_control(self, request: dict[str, Any]) -> dict[str, Any] | None:
        subtype = request.get("subtype")
        if subtype == "elicitation":
            self._record(REQUEST_ELICITATION, "declined", REASON_ELICITATION)
            return {"action": "decline"}
        if subtype == "request_user_dialog":
            self._record(REQUEST_DIALOG, "cancelled", REASON_DIALOG)
            return {"behavior": "cancelled"}
        return None

    def _on_spawned(self, process: ManagedProcess) -> None:
        loop = asyncio.get_running_loop()
        self._exit_watch = loop.create_task(self._watch_startup_exit(process))

    async def _watch_startup_exit(self, process: ManagedProcess) -> None:
        await process.wait()
        if not self._startup.done():
            self._startup.set_exception(StartupExit("the CLI exited during startup"))

    def _on_prompt_sent(self) -> None:
        if not self._startup.done():
            self._startup.set_result(None)

    def _on_consumer_done(self, task: asyncio.Task[None]) -> None:
        if not self._startup.done():
            self._startup.set_exception(StartupExit("the SDK query ended during startup"))
        # The future's exception may never be retrieved once the run is published.
        with contextlib.suppress(BaseException):
            self._startup.exception()

    # ---- consuming ------------------------------------------------------------------------

    async def _consume(self, messages: AsyncIterator[Any]) -> None:
        last_result: ResultMessage | None = None
        success: str | None = None
        assistant_error: str | None = None
        error: BaseException | None = None
        try:
            async for message in messages:
                if isinstance(message, StreamEvent):
                    if self._streamed.stream_event(message.event, message.parent_tool_use_id):
                        self._report_usage(self._streamed.facts())
                elif isinstance(message, ResultMessage):
                    last_result = message
                    self._report_usage(usage_from_result(message, len(self._message_ids) or None))
                    success = self._answer(message)
                    self._arm_dispose()
                elif isinstance(message, AssistantMessage):
                    if self._first_output is None:
                        self._first_output = self._transport.activity.last
                    if message.message_id is not None:
                        self._message_ids.add(message.message_id)
                    if self._streamed.merge(message.message_id, message.usage):
                        self._report_usage(self._streamed.facts())
                    if message.error is not None:
                        assistant_error = str(message.error)
                elif isinstance(message, RateLimitEvent):
                    # The account's state, host-side only: kept with the usage facts.
                    facts = rate_limit_facts(message.rate_limit_info)
                    if facts:
                        self._rate_limits = facts
                        self._report_usage(self._usage or UsageFacts())
                elif isinstance(message, SystemMessage) and message.subtype == "permission_denied":
                    self._record(REQUEST_TOOL, "denied", REASON_PRODUCT)
        except asyncio.CancelledError:
            raise
        except Exception as caught:
            error = caught
            self._error = caught
            _log.debug("Claude Code query ended with an exception", exc_info=True)
        finally:
            if self._dispose is not None:
                self._dispose.cancel()
        self._latch.settle(self._outcome(last_result, success, assistant_error, error))

    def _answer(self, message: ResultMessage) -> str | None:
        """The answer a result carries: its text, or with an output schema its JSON value."""
        if self._structured:
            return structured_answer(message)
        return message.result if is_strict_success(message) else None

    def _arm_dispose(self) -> None:
        if self._dispose is None:
            loop = asyncio.get_running_loop()
            delay = self._config.dispose_grace_ms / 1000.0
            self._dispose = loop.call_later(delay, self._transport.terminate)

    def _outcome(
        self,
        last_result: ResultMessage | None,
        success: str | None,
        assistant_error: str | None,
        error: BaseException | None,
    ) -> SubagentResult:
        if error is None and success is not None:
            return SubagentResult(StopReason.COMPLETED, (TextBlock(success),), None)
        exit_facts = self._exit_facts(error)
        if (
            last_result is not None
            and self._structured
            and last_result.subtype == "success"
            and last_result.is_error is False
            and self._answer(last_result) is None
        ):  # a success with no structured value: the schema was not met
            facts = FailureFacts(
                product=PRODUCT, stage="query-run", category=STRUCTURED_OUTPUT_CATEGORY
            )
        elif last_result is not None and self._answer(last_result) is None:
            # The CLI exits non-zero after an error result on purpose; that exit is kept too.
            facts = dataclasses.replace(result_facts(last_result, assistant_error), **exit_facts)
        elif last_result is not None and exit_facts:
            # A strict success, then an exit we did not cause: a result did arrive, so this is
            # not process-exit (that is "before any result"); the stream's end failed validation.
            facts = FailureFacts(
                product=PRODUCT, stage="query-run", category="unknown", **exit_facts
            )
        elif exit_facts and (error is None or isinstance(error, ProcessError | CLIConnectionError)):
            facts = FailureFacts(
                product=PRODUCT, stage="process", category="process-exit", **exit_facts
            )
        elif error is not None:
            facts = FailureFacts(
                product=PRODUCT, stage="query-run", category="unknown", **exit_facts
            )
        else:
            facts = FailureFacts(product=PRODUCT, stage="query-run", category="missing-result")
        process = self._transport.process
        if process is not None:  # dsh ended the tree because it ran into a configured limit
            facts = with_limits_hit(facts, process.limits_hit)
        diagnostic = failure_line(facts)
        if self._fact is not None:
            diagnostic = f"{diagnostic}\n{fact_line(self._mode, self._fact)}"
        return SubagentResult(StopReason.ERROR, (), diagnostic)

    def _exit_facts(self, error: BaseException | None) -> dict[str, Any]:
        """The exit code and signal of a non-zero CLI exit we did not cause, or ``{}``.

        The transport raises ``ProcessError`` only for such an exit, after observing it (the SDK
        turns it into ``ResultError`` after an error result, and may close the transport, which
        sets ``stopped_by_us``, before the exception reaches us).
        """
        outcome = self._transport.outcome
        if outcome is None or outcome.exit_code == 0:
            return {}
        if self._transport.stopped_by_us and not isinstance(error, ProcessError):
            return {}
        return {"exit_code": outcome.exit_code, "signal": outcome.signal}

    # ---- teardown -------------------------------------------------------------------------

    async def _teardown(self) -> None:
        try:
            await self._transport.close()
        finally:
            await self._stop_consumer()
            await self._remove_tmp()
        failure = self._transport.close_failure
        if failure is not None:
            _log.debug("Claude Code teardown failed", exc_info=failure)
            raise failure

    async def _stop_consumer(self) -> None:
        tasks = [t for t in (self._task, self._exit_watch) if t is not None]
        if not tasks:
            return
        await asyncio.wait(tasks, timeout=_CONSUMER_STOP_S)
        for task in tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _remove_tmp(self) -> None:
        """Remove the run dir if no spawn took it over (a spawn owns its ``owned_dir``)."""
        if self._tmp_dir is not None:
            path, self._tmp_dir = self._tmp_dir, None
            if not self._transport.spawn_attempted:
                await remove_off_loop(path)


async def _one_user_message(texts: Sequence[str]) -> AsyncIterator[dict[str, Any]]:
    """The task as one user message with one text block per prompt block.

    The rule both providers follow (Codex sends one input item per block): the model sees the
    blocks in order, as separate text parts, with no separator added.
    """
    blocks = [{"type": "text", "text": text} for text in texts]
    yield {
        "type": "user",
        "session_id": "",
        "message": {"role": "user", "content": blocks},
        "parent_tool_use_id": None,
    }
