"""dsh.jobs: the background Job registry and its store.

Jobs have random ids (``subagent-3f9a0c12be47``), settle once (``completed``, ``killed`` or
``failed``), are fenced by their owner's ``session_id`` and are admitted up to a per-owner
limit. Their records live in a :class:`JobStore` (the OS user's SQLite file by default), so they
outlive the process that ran them. Where a job's work runs is its registry's :class:`Executor`
(in this process by default; on a Ray cluster with the ``[ray]`` extra). The model-visible job
tools live in :mod:`dsh.jobs.tools`; errors in :mod:`dsh.jobs.errors`.
"""

from dsh.jobs._executor import Executor, JobStarted, JobWork, LocalExecutor, PortableWork
from dsh.jobs._executor_choice import RAY_EXTRA_HINT, executor_for
from dsh.jobs._holder import Holder, this_process
from dsh.jobs._job import (
    JobOverview,
    attach_job_meta,
    current_job_id,
    detach_requested,
    job_admitted,
    job_queued,
    snapshot_of,
)
from dsh.jobs._registry import JobRegistry
from dsh.jobs._sqlite_store import SqliteJobStore
from dsh.jobs._store import HOLDER_GONE_DETAIL, JobRecord, JobStore, MemoryJobStore, RecordFilter
from dsh.jobs._store_choice import MEMORY_STORE, default_store_path, store_for, store_path
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


def __getattr__(name: str) -> str:
    if name != "__version__":
        raise AttributeError(f"module 'dsh.jobs' has no attribute {name!r}")
    from importlib import metadata  # read when asked for: it is dear at start-up

    try:
        return metadata.version("dsh-jobs")
    except metadata.PackageNotFoundError:  # imported from a source tree that is not installed
        return "0+unknown"


__all__ = [
    "HOLDER_GONE_DETAIL",
    "MAX_RUNS_PER_NODE",
    "MEMORY_STORE",
    "RAY_EXTRA_HINT",
    "TERMINAL_STATUSES",
    "Executor",
    "Holder",
    "JobDone",
    "JobOutcome",
    "JobOverview",
    "JobOwner",
    "JobRecord",
    "JobRegistry",
    "JobSnapshot",
    "JobStarted",
    "JobStatus",
    "JobStore",
    "JobWork",
    "JobsConfig",
    "LocalExecutor",
    "MemoryJobStore",
    "PortableWork",
    "RecordFilter",
    "SqliteJobStore",
    "attach_job_meta",
    "completion_notice",
    "current_job_id",
    "default_store_path",
    "detach_requested",
    "executor_for",
    "job_admitted",
    "job_queued",
    "snapshot_of",
    "status_line",
    "store_for",
    "store_path",
    "this_process",
]
