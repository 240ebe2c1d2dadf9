"""One Relay run: the agent process, its reading task, the latch, the teardown."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from dsh.subagent import (
    ResolvedStartRequest,
    StopReason,
    SubagentResult,
    TextBlock,
    with_limits_hit,
)
from dsh.subagent.kit import FailureFacts, ProductRun, failure_line
from dsh.subagent_relay._mapping import PREFIX, PRODUCT, error_facts
from dsh.subagent_relay._usage import usage_from_report
from dsh.subprocess import BoundedLines, LineTooLong, ManagedProcess, SpawnSpec, SubprocessRuntime

__all__ = ["MAX_LINE_BYTES", "READY_TIMEOUT_S", "RelayRun", "StartupExit"]

_log = logging.getLogger("dsh.subagent_relay")

MAX_LINE_BYTES = 1 << 20
"""The longest line read from the agent; a longer one fails the run."""
READY_TIMEOUT_S = 30.0
"""How long a spawned agent may take to say ``ready``."""


class StartupExit(Exception):
    """The agent ended, or said something else, before it was ready."""


class RelayRun(ProductRun):
    """A run of one ``relay-agent`` process: spawned by ``spawn()``, ready after ``wait_ready()``,
    published by ``publish()``. ``last_activity`` moves on every line read from the agent."""

    prefix = PREFIX
    product = PRODUCT

    def __init__(self, spec: SpawnSpec, runtime: SubprocessRuntime) -> None:
        super().__init__()
        self._spec = spec
        self._runtime = runtime
        self._proc: ManagedProcess | None = None
        self._reader: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._taken = False

    # ---- driven by the provider ------------------------------------------------------------
    async def spawn(self) -> None:
        self._proc = await self._runtime.spawn(self._spec)
        self._reader = asyncio.get_running_loop().create_task(self._read(self._proc))

    async def wait_ready(self) -> None:
        """Return once the agent said ``ready``; raise ``StartupExit`` if it ended first."""
        async with asyncio.timeout(READY_TIMEOUT_S):
            await asyncio.shield(self._ready)

    # ---- ProductRun -----------------------------------------------------------------------
    async def publish(self, request: ResolvedStartRequest) -> None:
        proc = self._proc
        assert proc is not None
        assert proc.stdin is not None
        self._taken = True
        line = json.dumps({"type": "task", "texts": list(request.texts)}) + "\n"
        proc.stdin.write(line.encode())
        await proc.stdin.drain()

    def warm_usable(self) -> bool:
        proc = self._proc
        return (
            self._ready.done()
            and self._ready.exception() is None
            and not self._taken
            and proc is not None
            and proc.outcome is None
        )

    @property
    def process(self) -> ManagedProcess | None:
        return self._proc

    def startup_failure(self, error: Exception) -> tuple[FailureFacts, BaseException] | None:
        if not isinstance(error, StartupExit):
            return None
        outcome = self._proc.outcome if self._proc is not None else None
        if outcome is None or outcome.exit_code == 0:
            return FailureFacts(PRODUCT, "start", "unknown"), error
        facts = FailureFacts(
            PRODUCT, "start", "process-exit", exit_code=outcome.exit_code, signal=outcome.signal
        )
        return facts, error

    def _stop(self, aborted: bool) -> None:
        if self._proc is not None:
            self._proc.terminate()

    async def _teardown(self) -> None:
        try:
            if self._proc is not None:
                await self._proc.aclose()
        finally:
            if self._reader is not None:
                await asyncio.gather(self._reader, return_exceptions=True)
        if not self._ready.done():
            self._ready.set_exception(StartupExit("closed before ready"))
        if not self._ready.cancelled():
            self._ready.exception()  # retrieved: nobody may wait for it any more

    # ---- reading --------------------------------------------------------------------------
    async def _read(self, proc: ManagedProcess) -> None:
        assert proc.stdout is not None
        try:
            async for raw in BoundedLines(proc.stdout, MAX_LINE_BYTES):
                self._activity.touch()
                if self._on_message(raw):
                    break
        except LineTooLong:
            self._fail(FailureFacts(PRODUCT, "protocol", "line-too-long"), proc)
        outcome = await proc.wait()
        if not self._ready.done():
            self._ready.set_exception(StartupExit("the agent ended before it was ready"))
        if outcome.exit_code != 0 or outcome.signal is not None:
            facts = FailureFacts(
                PRODUCT,
                "process",
                "process-exit",
                exit_code=outcome.exit_code,
                signal=outcome.signal,
            )
        else:
            facts = FailureFacts(PRODUCT, "process", "missing-answer")
        self._fail(facts, proc)

    def _on_message(self, raw: bytes) -> bool:
        """Handle one line; ``True`` once the run has settled."""
        try:
            message: Any = json.loads(raw)
        except ValueError:
            message = None
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "ready" and not self._ready.done():
            self._ready.set_result(None)
            return False
        if kind == "answer" and self._taken:
            self._first_output = self._activity.last
            self._usage = usage_from_report(message.get("usage"))
            text = message.get("text")
            if isinstance(text, str) and text.strip():
                self._latch.settle(SubagentResult(StopReason.COMPLETED, (TextBlock(text),), None))
            else:
                self._fail(FailureFacts(PRODUCT, "reply", "missing-answer"), self._proc)
            return True
        if kind == "error" and self._taken:
            self._fail(error_facts(message), self._proc)
            return True
        # Anything else is a protocol error: fail closed, never guess.
        if not self._ready.done():
            self._ready.set_exception(StartupExit("an unexpected line before ready"))
        self._fail(FailureFacts(PRODUCT, "protocol", "unexpected-message"), self._proc)
        if self._proc is not None:
            self._proc.terminate()
        return True

    def _fail(self, facts: FailureFacts, proc: ManagedProcess | None) -> None:
        if proc is not None:
            facts = with_limits_hit(facts, proc.limits_hit)
        if self._latch.settle(SubagentResult(StopReason.ERROR, (), failure_line(facts))):
            _log.debug("%s run %s failed: %s", PRODUCT, self.id, facts.category)
