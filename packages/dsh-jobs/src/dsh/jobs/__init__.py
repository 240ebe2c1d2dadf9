"""dsh.jobs: the background Job registry.

Jobs have per-kind ids (``subagent-1``), settle once (``completed``, ``killed`` or ``failed``),
are fenced by their owner's ``session_id`` and are admitted up to a per-owner limit. Where a
job's work runs is its registry's :class:`Executor` (in this process by default; on a Ray
cluster with the ``[ray]`` extra). The model-visible job tools live in :mod:`dsh.jobs.tools`;
errors in :mod:`dsh.jobs.errors`.
"""

from importlib import metadata as _metadata

from dsh.jobs._executor import Executor, JobStarted, JobWork, LocalExecutor, PortableWork
from dsh.jobs._executor_choice import RAY_EXTRA_HINT, executor_for
from dsh.jobs._registry import JobRegistry, attach_job_meta, current_job_id
from dsh.jobs._types import (
    MAX_RUNS_PER_NODE,
    TERMINAL_STATUSES,
    JobDone,
    JobOutcome,
    JobOwner,
    JobsConfig,
    JobSnapshot,
    JobStatus,
    completion_notice,
    status_line,
)

try:
    __version__ = _metadata.version("dsh-jobs")
except _metadata.PackageNotFoundError:  # imported from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "MAX_RUNS_PER_NODE",
    "RAY_EXTRA_HINT",
    "TERMINAL_STATUSES",
    "Executor",
    "JobDone",
    "JobOutcome",
    "JobOwner",
    "JobRegistry",
    "JobSnapshot",
    "JobStarted",
    "JobStatus",
    "JobWork",
    "JobsConfig",
    "LocalExecutor",
    "PortableWork",
    "attach_job_meta",
    "completion_notice",
    "current_job_id",
    "executor_for",
    "status_line",
]
