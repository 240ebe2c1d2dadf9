"""A background delegation as plain data, for executors that run jobs elsewhere (Ray).

The harness sends the provider's ``kind`` and its profile ``config`` (the table the profile
validated), and the request, the tool's limits and its workspace, each whole. The worker
builds the provider from them (so the product's env comes from the worker's own environment plus
the config's ``inherit_env`` names) and runs
:func:`~dsh.tool_subagent._job_work.background_outcome`, the same work as a local job.
No live object and no credential value travels: credentials are named, never copied.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dsh.jobs import JobOutcome, JobStatus, PortableWork
from dsh.subagent import SubagentError, SubagentService, SubagentStartRequest
from dsh.tool_subagent._job_work import background_outcome
from dsh.tool_subagent._known_providers import load_provider
from dsh.tool_subagent._limits import RunLimits
from dsh.tool_subagent._otel import DelegationLabels
from dsh.tool_subagent._workspace import WorkspaceOptions

__all__ = [
    "BUILD_FAILED",
    "NO_WORKSPACE",
    "TARGET",
    "WORKER_SETUP",
    "portable_delegation",
    "run_delegation",
]

logger = logging.getLogger("dsh.tool_subagent")

TARGET = "dsh.tool_subagent._portable_job:run_delegation"
#: What each remote executor process runs when it starts: the orphan reaper of its node, so the
#: trees a lost worker left there are gone before a new run starts.
WORKER_SETUP = ("dsh.subprocess:reap_orphans",)
BUILD_FAILED = "the subagent provider could not be built on the worker (stage: executor)"
NO_WORKSPACE = (
    "the job's working directory does not exist on the worker node (stage: executor); a job's"
    " cwd must be on a filesystem every node shares"
)


def portable_delegation(
    kind: str,
    config: Mapping[str, Any],
    request: SubagentStartRequest,
    limits: RunLimits | None = None,
    tool: str | None = None,
    trace_context: Mapping[str, str] | None = None,
    workspace: WorkspaceOptions | None = None,
    max_concurrent: int | None = None,
) -> PortableWork:
    """The job's work as plain data; raises ``ValueError`` for a request with a non-text part.

    The request travels whole (:meth:`~dsh.subagent.SubagentStartRequest.to_json`: every field,
    so a field added to the request needs no change here), and so do the tool's ``limits`` and
    ``workspace``, enforced where the run is, by the worker. ``tool`` names the delegation tool
    and ``trace_context`` is the starting side's W3C trace context (``_otel.trace_carrier()``):
    the worker's span continues the host's trace. ``max_concurrent`` is the provider's queue
    limit, applied per worker process (each worker has a queue of its own).
    """
    limits = limits or RunLimits(timeout_s=None, stall_timeout_s=None, max_total_tokens=None)
    queue = {} if max_concurrent is None else {"max_concurrent": max_concurrent}
    return PortableWork(
        TARGET,
        {
            **queue,
            "kind": kind,
            "config": dict(config),
            "request": request.to_json(),
            "limits": asdict(limits),
            "workspace": asdict(workspace) if workspace is not None else None,
            "tool": tool,
            "trace_context": dict(trace_context or {}),
        },
    )


async def run_delegation(
    *,
    kind: str,
    config: dict[str, Any],
    request: dict[str, Any],
    limits: dict[str, Any],
    workspace: dict[str, Any] | None = None,
    tool: str | None = None,
    trace_context: dict[str, str] | None = None,
    max_concurrent: int | None = None,
) -> JobOutcome:
    """The worker side: build the provider here, run the delegation, close everything.

    A cwd that is not a directory on this node fails the job before anything is built or
    spawned (the path stays out of the text: it goes to a model). A ``worktree`` workspace is
    made here, on the worker's node, from the repository at the cwd (a path every node shares).
    """
    started = SubagentStartRequest.from_json(request)
    cwd = started.parent.cwd
    if cwd is not None and not Path(cwd).is_dir():  # noqa: ASYNC240 - one stat, as the kit does
        logger.debug("job cwd %r is missing on this worker node", cwd)
        return JobOutcome(JobStatus.FAILED, detail=NO_WORKSPACE)
    try:
        provider = load_provider(kind, config)
    except SubagentError as exc:
        # The harness validated the same config; failing here means this node's install differs.
        logger.debug("building provider kind %r on the worker failed", kind, exc_info=exc)
        return JobOutcome(JobStatus.FAILED, detail=BUILD_FAILED)
    service = SubagentService()
    service.register(provider)
    try:
        model = config.get("model")
        labels = DelegationLabels(
            tool or provider.name, provider.name, kind, model if isinstance(model, str) else None
        )
        options = WorkspaceOptions(**workspace) if workspace is not None else None
        return await background_outcome(
            service,
            provider.name,
            started,
            RunLimits(**limits),
            labels,
            trace_context,
            options,
            max_concurrent,
        )
    finally:
        await service.aclose()
