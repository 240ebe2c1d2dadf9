"""Errors raised by :mod:`dsh.jobs`.

One tree; every message is safe to show a model::

    JobError
    ├── JobArgumentError      (also a ValueError) empty kind/label, non-positive timeout
    ├── JobLimitError         admission refused: the owner already has the maximum of live jobs
    ├── UnknownJobError       (also a LookupError) ``unknown job <id>``
    │   └── ForeignJobError   another owner's job: the same text, so a model learns nothing
    ├── JobRegistryClosedError  start() after aclose()
    ├── JobExecutorError      the executor itself failed (a lost worker or node, no cluster)
    └── JobStoreError         the job store cannot be used (for the operator: it names the path)
"""

from __future__ import annotations

__all__ = [
    "ForeignJobError",
    "JobArgumentError",
    "JobError",
    "JobExecutorError",
    "JobLimitError",
    "JobRegistryClosedError",
    "JobStoreError",
    "UnknownJobError",
]


class JobError(Exception):
    """Base of every error :mod:`dsh.jobs` raises. ``str()`` is a safe, model-visible message,
    except :class:`JobStoreError`'s, which is the operator's (it names a path)."""


class JobArgumentError(JobError, ValueError):
    """An argument broke a rule (empty kind or label, non-positive timeout)."""


class JobLimitError(JobError):
    """Admission refused; no id was allocated and the work never started."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(
            f"background job limit reached for this owner (limit: {limit}); use job_kill to stop"
            " an unneeded job, wait for it to finish, then retry"
        )


class UnknownJobError(JobError, LookupError):
    """No job with this id exists (or its record was dropped by close_owner)."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"unknown job {job_id}")

    def __str__(self) -> str:  # LookupError would otherwise repr() the argument
        return f"unknown job {self.job_id}"


class ForeignJobError(UnknownJobError):
    """The job exists but another owner's: its text is exactly an unknown id's, so a model
    cannot tell another owner's job from none (the type tells the host)."""


class JobRegistryClosedError(JobError):
    """The registry was closed; it accepts no new jobs."""

    def __init__(self) -> None:
        super().__init__("the job registry is closed")


class JobExecutorError(JobError):
    """The executor running a job failed (not the work): a lost worker or node, no cluster.

    Its message is built by dsh from fixed words only, so the registry shows it as the failed
    job's detail: ``job executor failure (executor: ray; stage: executor; category: <c>)``. The
    raw error (Ray's own text) stays on ``__cause__`` and in the DEBUG log.
    """

    def __init__(self, executor: str, category: str) -> None:
        self.executor = executor
        self.category = category
        super().__init__(
            f"job executor failure (executor: {executor}; stage: executor; category: {category})"
        )


class JobStoreError(JobError):
    """The job store cannot be opened or used: a directory that cannot be written, a file that
    is not a dsh job store, one written by a newer dsh, or one another process keeps locked.

    Raised when the store opens, before any job starts. The message names the store's path and
    what to do, so it is for the operator (a profile error, ``dsh jobs``), never for a model.
    """

    def __init__(self, message: str, *, path: str) -> None:
        self.path = path
        super().__init__(message)
