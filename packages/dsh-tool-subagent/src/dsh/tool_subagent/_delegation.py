"""One delegation's run: start → result → whole-tree close, in its telemetry span.

Shared by the foreground tool call and by a background job's work (``_job_work``, in process or
on a remote executor's worker), so a run means the same wherever it runs.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from dsh.jobs import current_job_id
from dsh.subagent import (
    PublishedRun,
    StopReason,
    SubagentError,
    SubagentResult,
    SubagentService,
    SubagentStartRequest,
    UsageFacts,
)
from dsh.subagent.kit import CloseOnce, RunTimings, first_activity
from dsh.subprocess import spawn_trace_context
from dsh.tool_subagent._limits import RunLimits, Watchdog, limit_text
from dsh.tool_subagent._otel import (
    DelegationLabels,
    DelegationSpan,
    delegation_span,
    failure_category,
    trace_carrier,
)
from dsh.tool_subagent._queue import Admission, queue_for
from dsh.tool_subagent._workspace import Changes, WorkspaceError, WorkspaceOptions
from dsh.tool_subagent._worktree import Worktree, finish_worktree, make_worktree

__all__ = [
    "NO_LIMITS",
    "Finished",
    "Interrupted",
    "finish_span",
    "host_facts",
    "killed",
    "run_to_end",
    "run_to_end_in",
    "safe_text",
]

#: What ``run_to_end`` applies when its caller passes none (the delegation tool always passes
#: its own, whose stall limit defaults to 900 s and token cap to 50,000,000).
NO_LIMITS = RunLimits(timeout_s=None, stall_timeout_s=None, max_total_tokens=None)

logger = logging.getLogger("dsh.tool_subagent")

_STOP_REASONS = frozenset(str(reason) for reason in StopReason)


@dataclass(frozen=True, slots=True)
class Finished:
    """The run settled with ``result``; ``dispose`` is the safe text of a failed close.

    ``limit`` is the fixed text of the caller's limit that stopped the run (``limit_field``
    names it), or ``None``: a run that completed before its limit's cancel landed keeps its
    answer and has no ``limit``.
    """

    result: SubagentResult
    dispose: str | None
    limit: str | None = None
    limit_field: str | None = None
    usage: UsageFacts | None = None
    timings: RunTimings | None = None
    changes: Changes | None = None
    queue: Admission | None = None

    def host_facts(self) -> dict[str, Any] | None:
        """The host-only facts (``ToolResult.meta``, ``JobOutcome.meta``), or ``None``."""
        return host_facts(self.usage, self.timings, self.changes, self.queue)


@dataclass(frozen=True, slots=True)
class StartLimited:
    """The wall-clock limit expired while the run was starting (the start rolled back)."""

    text: str


@dataclass(frozen=True, slots=True)
class Interrupted:
    """Awaiting the result raised ``error`` (a cancellation); the run was closed anyway."""

    error: BaseException
    dispose: str | None
    usage: UsageFacts | None = None
    timings: RunTimings | None = None
    changes: Changes | None = None
    queue: Admission | None = None

    def host_facts(self) -> dict[str, Any] | None:
        """What the run had spent when it was cancelled (a killed job keeps it), or ``None``."""
        return host_facts(self.usage, self.timings, self.changes, self.queue)


def host_facts(
    usage: UsageFacts | None,
    timings: RunTimings | None,
    changes: Changes | None = None,
    queue: Admission | None = None,
) -> dict[str, Any] | None:
    """``{"usage": ..., "timings": ..., "workspace": ..., "queue": ...}`` as JSON values, leaving
    out what is unknown (``workspace`` only for a worktree run, ``queue`` only for a provider
    with ``max_concurrent``)."""
    facts: dict[str, Any] = {}
    if queue is not None:
        facts["queue"] = queue.as_json()
    if usage is not None:
        facts["usage"] = usage.as_json()
    if timings is not None:
        facts["timings"] = timings.as_json()
    if changes is not None:
        facts["workspace"] = changes.as_json()
    return facts or None


def safe_text(exc: BaseException) -> str:
    """Model-visible text of an exception: a ``SubagentError``'s safe message, else its type name.

    A group (a start whose rollback failed too) shows each member's safe text, joined by ``; ``.
    """
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(safe_text(member) for member in exc.exceptions)
    if isinstance(exc, SubagentError):
        return str(exc)
    return type(exc).__name__


def killed() -> bool:
    """Whether the running task has a cancellation pending (a job_kill or an owner close)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def _start(
    service: SubagentService, provider: str, request: SubagentStartRequest, where: str
) -> PublishedRun | str:
    """The published run, or the safe text of the start failure (cancellation propagates)."""
    try:
        return await service.start(provider, request)
    except Exception as exc:  # an ExceptionGroup too: start and rollback both failed
        logger.debug("%s subagent start failed", where, exc_info=exc)
        return safe_text(exc)


async def _dispose(run: PublishedRun, where: str) -> str | None:
    """``aclose()`` the run; the safe text of its failure, or ``None``.

    The close runs to its end even when this task is cancelled meanwhile (a ``job_kill``
    followed by a ``close_owner``): only then does the ``CancelledError`` propagate.
    """
    failure = await CloseOnce().run(run.aclose)
    if failure is None:
        return None
    logger.debug("%s subagent dispose failed", where, exc_info=failure)
    return safe_text(failure)


async def _start_within(
    service: SubagentService,
    provider: str,
    request: SubagentStartRequest,
    where: str,
    deadline: float | None,
) -> PublishedRun | str | StartLimited:
    """:func:`_start`, cancelled at ``deadline`` (the provider's start rolls back on cancel)."""
    if deadline is None:
        return await _start(service, provider, request, where)
    bound = asyncio.timeout_at(deadline)
    try:
        async with bound:
            run = await _start(service, provider, request, where)
    except TimeoutError:
        if not bound.expired():
            raise
        return StartLimited("")
    if bound.expired() and isinstance(run, str):
        return StartLimited(run)  # the cancelled start raised its rollback failure instead
    return run


async def run_to_end(
    service: SubagentService,
    provider: str,
    request: SubagentStartRequest,
    where: str,
    limits: RunLimits = NO_LIMITS,
    labels: DelegationLabels | None = None,
    workspace: WorkspaceOptions | None = None,
    max_concurrent: int | None = None,
) -> str | Finished | Interrupted:
    """Start → result → dispose, the steps the foreground and the background share.

    Returns the start failure's safe text, or how the run ended; the run is always closed
    (through :func:`_dispose`) before this returns, and a cancellation that arrives during
    that close propagates from here once the close has ended. ``limits`` are the caller's
    (``_limits``): the wall clock counts from here, the stall clock from publication; an
    expired limit cancels the run and the ending carries its fixed text. ``labels`` name the
    delegation's OpenTelemetry span (``_otel``; default: the provider's name). ``workspace``
    ``worktree`` runs the product in a git worktree made for the run (``_worktree``).
    ``max_concurrent`` (the provider's profile setting) first takes a slot in the provider's
    fair queue of this process (``_queue``), inside the wall-clock limit.
    """
    with delegation_span(labels or DelegationLabels(provider, provider), where) as span:
        end = await run_to_end_in(
            service, provider, request, where, limits, span, workspace, max_concurrent
        )
        finish_span(span, end)
        return end


async def run_to_end_in(
    service: SubagentService,
    provider: str,
    request: SubagentStartRequest,
    where: str,
    limits: RunLimits,
    span: DelegationSpan,
    workspace: WorkspaceOptions | None = None,
    max_concurrent: int | None = None,
) -> str | Finished | Interrupted:
    """:func:`run_to_end` in the caller's ``span``; in a worktree when ``workspace`` asks, after
    a slot in the provider's queue when ``max_concurrent`` is set."""

    def step(began: float | None) -> _Step:
        return functools.partial(
            _run_in, service, provider, where=where, limits=limits, span=span, began=began
        )

    if max_concurrent is None:
        return await _run_where(step(None), request, where, span, workspace)
    began = asyncio.get_running_loop().time()  # the wall clock counts the wait in the queue
    queue = queue_for(provider)
    owner = request.parent.session_id or ""
    with span.phase("dsh.queue") as phase:
        admission = await queue.enter(owner, max_concurrent, limits.start_deadline(began))
        if phase is not None and admission is not None:
            for name, value in admission.as_json().items():
                phase.set_attribute(f"dsh.queue.{name}", value)
    if admission is None:  # the wall-clock limit expired in the queue: nothing was started
        assert limits.timeout_s is not None
        text = limit_text("timeout_s", limits.timeout_s)
        return Finished(SubagentResult(StopReason.ABORTED), None, text, "timeout_s")
    try:
        end = await _run_where(step(began), request, where, span, workspace)
    finally:
        queue.leave()
    return end if isinstance(end, str) else replace(end, queue=admission)


#: :func:`_run_in` with everything but the request bound.
_Step = Callable[[SubagentStartRequest], Awaitable["str | Finished | Interrupted"]]


async def _run_where(
    run: _Step,
    request: SubagentStartRequest,
    where: str,
    span: DelegationSpan,
    workspace: WorkspaceOptions | None,
) -> str | Finished | Interrupted:
    if workspace is None or not workspace.worktree:
        return await run(request)
    name = current_job_id() or f"run-{secrets.token_hex(6)}"
    try:
        with span.phase("dsh.workspace"):
            worktree = await make_worktree(request.parent.cwd, workspace, name)
    except WorkspaceError as exc:
        logger.debug("%s worktree for %s not made", where, name, exc_info=exc)
        return str(exc)
    request = replace(request, parent=replace(request.parent, cwd=worktree.cwd))
    end: str | Finished | Interrupted | None = None
    try:
        end = await run(request)
    finally:
        changes = await _finished(worktree, span)
    if isinstance(end, str):
        return end
    return replace(end, changes=changes)


async def _finished(worktree: Worktree, span: DelegationSpan) -> Changes:
    with span.phase("dsh.workspace.finish"):
        return await finish_worktree(worktree)


async def _run_in(
    service: SubagentService,
    provider: str,
    request: SubagentStartRequest,
    where: str,
    limits: RunLimits,
    span: DelegationSpan,
    began: float | None,
) -> str | Finished | Interrupted:
    if began is None:
        began = asyncio.get_running_loop().time()
    # A product spawned for this run gets the start span's trace context (TRACEPARENT).
    with span.phase("dsh.start"), spawn_trace_context(trace_carrier()):
        deadline = limits.start_deadline(began)
        run = await _start_within(service, provider, request, where, deadline)
    if isinstance(run, StartLimited):
        assert limits.timeout_s is not None
        text = limit_text("timeout_s", limits.timeout_s)
        # A rollback that could not prove exit is reported like a failed dispose.
        return Finished(SubagentResult(StopReason.ABORTED), run.text or None, text, "timeout_s")
    if isinstance(run, str):
        return run
    clock = asyncio.get_running_loop().time
    started = clock()
    watchdog = Watchdog(run, limits, began)
    error: BaseException | None = None
    with span.phase("dsh.turn") as turn:
        try:
            result = await run.result()
        except BaseException as exc:  # a cancellation (the service turns any Exception into ERROR)
            error = exc
        watchdog.stop()
        span.first_activity(turn, first_activity(run))
    answered = None if error is not None else clock()
    with span.phase("dsh.teardown") as teardown:
        dispose = await _dispose(run, where)
        if teardown is not None:
            teardown.set_attribute("dsh.tree_exit.proven", dispose is None)
    timings = _timings(run, began, started, answered, None if dispose else clock())
    if error is not None:
        return Interrupted(error, dispose, run.usage, timings)
    usage = run.usage
    watchdog.settle(usage)
    if watchdog.expired is not None and result.stop_reason != StopReason.COMPLETED:
        return Finished(result, dispose, watchdog.expired, watchdog.field, usage, timings)
    return Finished(result, dispose, usage=usage, timings=timings)


def finish_span(span: DelegationSpan, end: str | Finished | Interrupted) -> None:
    """How the delegation ended, in its span: only names, numbers and the safe category.

    Outcomes: ``completed``, ``error``, ``cancelled``, ``limit``, ``max_tokens``, ``refusal``,
    ``start_failed`` and ``teardown_failed`` (an answer whose close could not prove exit).
    """
    if isinstance(end, str):
        span.finish("start_failed", category=failure_category(end))
        return
    if isinstance(end, Interrupted):
        span.finish("cancelled")
        return
    # A third-party provider may report a stop reason of its own: counted as an error.
    reason = str(end.result.stop_reason)
    if reason not in _STOP_REASONS:
        reason = "unknown"
    category = end.limit_field or failure_category(end.result.diagnostic)
    if end.limit is not None:
        outcome = "limit"
    elif end.dispose is not None:
        outcome, category = "teardown_failed", category or "teardown"
    elif reason == StopReason.ABORTED:
        outcome = "cancelled"
    else:
        outcome = "error" if reason == "unknown" else reason
    span.finish(
        outcome, stop_reason=reason, category=category, usage=end.usage, timings=end.timings
    )


def _timings(
    run: PublishedRun, began: float, started: float, answered: float | None, exited: float | None
) -> RunTimings:
    """The run's stamps in seconds since ``began``, all on the loop's clock.

    ``tree_exit_s`` is left out when the close could not prove the tree gone.
    """
    first = first_activity(run)
    if first is not None:  # a time.monotonic() stamp; the loop's clock may be another one
        first += asyncio.get_running_loop().time() - time.monotonic()

    def since(stamp: float | None) -> float | None:
        return None if stamp is None else round(max(0.0, stamp - began), 4)

    return RunTimings(
        started_s=since(started),
        first_activity_s=since(first),
        answer_s=since(answered),
        tree_exit_s=since(exited),
    )
