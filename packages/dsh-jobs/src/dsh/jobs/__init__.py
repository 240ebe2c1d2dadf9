"""dsh.jobs: the background Job registry.

Jobs have per-kind ids (``subagent-1``), settle once (``completed``, ``killed`` or ``failed``),
are fenced by their owner's ``session_id`` and are admitted up to a per-owner limit. The
model-visible job tools live in :mod:`dsh.jobs.tools`; errors in :mod:`dsh.jobs.errors`.
"""

from importlib import metadata as _metadata

from dsh.jobs._registry import JobRegistry, JobWork
from dsh.jobs._types import (
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
    "TERMINAL_STATUSES",
    "JobDone",
    "JobOutcome",
    "JobOwner",
    "JobRegistry",
    "JobSnapshot",
    "JobStatus",
    "JobWork",
    "JobsConfig",
    "completion_notice",
    "status_line",
]
