"""A background job's work: one delegation run to its end, mapped to the job's outcome.

The same work runs in this process (a local job) and on a remote executor's worker
(``_portable_job``), so a job means the same wherever it runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from dsh.jobs import JobOutcome, JobStatus, attach_job_meta, current_job_id
from dsh.subagent import StopReason, SubagentService, SubagentStartRequest
from dsh.tool_subagent._delegation import (
    NO_LIMITS,
    Finished,
    Interrupted,
    finish_span,
    killed,
    run_to_end_in,
)
from dsh.tool_subagent._limits import RunLimits
from dsh.tool_subagent._otel import DelegationLabels, delegation_span, remote_parent
from dsh.tool_subagent._workspace import WorkspaceOptions, with_changes

__all__ = ["background_outcome"]


async def background_outcome(
    service: SubagentService,
    provider: str,
    request: SubagentStartRequest,
    limits: RunLimits = NO_LIMITS,
    labels: DelegationLabels | None = None,
    trace_context: Mapping[str, str] | None = None,
    workspace: WorkspaceOptions | None = None,
    max_concurrent: int | None = None,
) -> JobOutcome:
    """A background job's whole work: the run to its end, mapped to the job's outcome.

    A run stopped by a limit ends ``failed`` with the limit's fixed text as the detail.
    ``trace_context`` is the starting side's ``trace_carrier()`` when the work runs in another
    process (Ray): the delegation's span continues that trace. A ``worktree`` workspace's
    changes line follows the job's output. ``max_concurrent``: the run waits for a slot in the
    provider's fair queue of this process first (the job reads ``queued`` meanwhile).
    """
    labels = labels or DelegationLabels(provider, provider)
    with remote_parent(trace_context), delegation_span(labels, "background") as span:
        job_id = current_job_id()
        span.event("dsh.job.running", {"dsh.job.id": job_id} if job_id else {})
        end = await run_to_end_in(
            service, provider, request, "background", limits, span, workspace, max_concurrent
        )
        finish_span(span, end)
        status = "killed"  # unless the mapping below returns: it raises only a cancellation
        try:
            outcome = _job_outcome(end, structured=request.output_schema is not None)
            status = str(outcome.status)
        finally:
            span.event("dsh.job.settled", {"dsh.job.status": status})
        return outcome


def _job_outcome(end: str | Finished | Interrupted, *, structured: bool = False) -> JobOutcome:
    """How a background run ended, as its job's outcome (a job_kill's cancellation raises).

    ``structured``: the request had an output schema, so a completed job keeps the checked
    value in its host-only ``meta`` (``structured_output``) beside the JSON text it outputs.
    """
    if isinstance(end, str):
        if killed():
            # Killed while starting, and the start then failed instead of raising the
            # cancellation (a Codex rollback that could not prove exit): keep that fact.
            return JobOutcome(JobStatus.KILLED, detail=end)
        return JobOutcome(JobStatus.FAILED, detail=end)
    if isinstance(end, Interrupted):
        # job_kill (or an owner close): the run was closed before the job settles, and a
        # failed teardown stays in the killed job's detail instead of being dropped. What the
        # run spent until then stays with the job although its work ends by raising.
        meta = end.host_facts()
        if meta is not None:
            attach_job_meta(meta)
        if end.dispose is None or not isinstance(end.error, asyncio.CancelledError):
            raise end.error
        detail = f"dispose failed: {end.dispose}"
        return JobOutcome(JobStatus.KILLED, detail=detail, meta=meta)
    result, dispose = end.result, end.dispose
    output = with_changes(result.text, end.changes)
    suffix = f"; dispose failed: {dispose}" if dispose else ""
    meta = end.host_facts()
    if end.limit is not None:
        return JobOutcome(JobStatus.FAILED, detail=end.limit + suffix, output=output, meta=meta)
    reason = result.stop_reason
    if reason == StopReason.COMPLETED:
        if dispose:
            failed = f"completed{suffix}"
            return JobOutcome(JobStatus.FAILED, detail=failed, output=output, meta=meta)
        if structured:
            meta = {**(meta or {}), "structured_output": result.structured_output}
        return JobOutcome(JobStatus.COMPLETED, output=output, meta=meta)
    if reason == StopReason.ABORTED:
        return JobOutcome(JobStatus.KILLED, detail=suffix[2:] or None, output=output, meta=meta)
    detail = str(reason)
    if result.diagnostic:
        detail += f"; diagnostic: {result.diagnostic}"
    return JobOutcome(JobStatus.FAILED, detail=detail + suffix, output=output, meta=meta)
