"""One job in memory: its state, its record and snapshot, and what its work can ask about it.

The registry (:mod:`dsh.jobs._registry`) owns these; a job's work reads its own through the
context variable the registry sets in the job's task.
"""

from __future__ import annotations

import asyncio
import contextvars
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dsh.jobs._holder import this_process
from dsh.jobs._store import JobRecord
from dsh.jobs._types import JobOutcome, JobOwner, JobSnapshot, JobStatus
from dsh.jobs.errors import JobExecutorError

__all__ = [
    "CURRENT_JOB",
    "Job",
    "JobOverview",
    "attach_job_meta",
    "current_job_id",
    "detach_requested",
    "job_admitted",
    "job_queued",
    "joined",
    "new_id",
    "safe_exception_detail",
    "session_of",
    "snapshot_of",
]


@dataclass(eq=False)
class Job:
    id: str
    kind: str
    label: str
    owner_session: str | None
    started_at: float
    origin: str
    status: JobStatus = JobStatus.RUNNING
    detail: str | None = None
    output: str = ""
    finished_at: float | None = None
    reported: bool = False
    kill_requested: bool = False
    kill_reason: str | None = None
    detached: bool = False
    waiters: int = 0
    noticed: bool = False
    #: ``(reported, noticed)`` as the settlement wrote them.
    settled_flags: tuple[bool, bool] | None = None
    where: str | None = None
    meta: Mapping[str, Any] | None = None
    task: asyncio.Task[JobOutcome] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set once the executor has begun the work (``started``), or when the job settles.
    began: asyncio.Event = field(default_factory=asyncio.Event)
    #: The job's live place in its work's own queue (1: next), while it reads ``queued``.
    place: Callable[[], int | None] | None = None
    #: Writes plain changes to the job's stored record (the registry sets it).
    persist: Callable[[Mapping[str, Any]], None] | None = None

    def queue_detail(self) -> str | None:
        """``place <n>`` while the job waits in its work's queue, else the job's detail."""
        if self.status is JobStatus.QUEUED and self.place is not None:
            place = self.place()
            if place is not None:
                return f"place {place}"
        return self.detail

    def record(self, work: str | None = None) -> JobRecord:
        return JobRecord(
            id=self.id,
            kind=self.kind,
            label=self.label,
            owner=self.owner_session,
            origin=self.origin,
            status=self.status,
            started_at=self.started_at,
            holder=this_process(),
            detail=self.queue_detail(),
            output=self.output,
            finished_at=self.finished_at,
            reported=self.reported,
            noticed=self.noticed,
            where=self.where,
            meta=self.meta,
            work=work,
        )


def snapshot_of(record: JobRecord) -> JobSnapshot:
    """A record as a :class:`JobSnapshot`."""
    finished = record.finished_at
    return JobSnapshot(
        id=record.id,
        kind=record.kind,
        label=record.label,
        owner_session=record.owner,
        status=record.status,
        detail=record.detail,
        started_at=datetime.fromtimestamp(record.started_at, UTC),
        finished_at=datetime.fromtimestamp(finished, UTC) if finished is not None else None,
        reported=record.reported,
        where=record.where,
        meta=record.meta,
    )


@dataclass(frozen=True, slots=True)
class JobOverview:
    """What ``job_list`` shows: the owner's live jobs, its newest finished ones, and how many
    finished ones are left out."""

    live: list[JobSnapshot]
    finished: list[JobSnapshot]
    more: int


CURRENT_JOB: contextvars.ContextVar[Job | None] = contextvars.ContextVar(
    "dsh.jobs.current_job", default=None
)


def current_job_id() -> str | None:
    """The id of the job whose work is running in this task (``None`` outside a job's work).

    Set where the registry runs the work, so work run in this process (``LocalExecutor``) sees
    it, and so does an executor's ``execute``; work an executor runs elsewhere does not.
    """
    job = CURRENT_JOB.get()
    return job.id if job is not None else None


def detach_requested() -> bool:
    """Whether the job whose work runs in this task is being let go rather than killed
    (:meth:`JobRegistry.detach_owner`): an executor whose work runs in a process of its own
    then leaves that process running when it is cancelled."""
    job = CURRENT_JOB.get()
    return job is not None and job.detached


def attach_job_meta(meta: Mapping[str, Any]) -> bool:
    """Keep ``meta`` as the host-only facts of the job whose work runs in this task.

    For work that ends by raising (a killed job's cancellation), which returns no
    :class:`JobOutcome` to carry them; an outcome's own ``meta`` replaces them. Returns whether
    a job was there to take them (not outside a job's work, nor on a remote executor's worker).
    """
    job = CURRENT_JOB.get()
    if job is None:
        return False
    job.meta = dict(meta)
    return True


def job_queued(place: Callable[[], int | None]) -> bool:
    """The job whose work runs in this task waits in a queue of its work's own (a provider's
    fair queue): it reads ``queued``, its detail ``place <n>`` from ``place()`` (1: next).

    Returns whether a running job was there to mark (not outside a job's work, nor on a remote
    executor's worker, nor once a kill is under way). The stored record gets the status and the
    place at entry; a snapshot in this process reads the live place.
    """
    job = CURRENT_JOB.get()
    if job is None or job.status is not JobStatus.RUNNING:
        return False
    job.place = place
    job.status = JobStatus.QUEUED
    if job.persist is not None:
        job.persist({"status": str(JobStatus.QUEUED), "detail": job.queue_detail()})
    return True


def job_admitted() -> None:
    """The queued job whose work runs in this task left its queue: it reads ``running`` again
    (a job being killed keeps ``stopping``)."""
    job = CURRENT_JOB.get()
    if job is None or job.place is None:
        return
    job.place = None
    if job.status is JobStatus.QUEUED:
        job.status = JobStatus.RUNNING
        if job.persist is not None:
            job.persist({"status": str(JobStatus.RUNNING), "detail": None})


def session_of(owner: JobOwner | None) -> str | None:
    return None if owner is None else owner.session_id


def safe_exception_detail(exc: BaseException) -> str:
    if isinstance(exc, JobExecutorError):
        return str(exc)  # built by dsh from fixed words: safe by construction
    # Only the type name: the registry cannot know whether an exception's text is safe for a
    # model (it may carry paths, env values or product text). The text goes to the DEBUG log.
    return type(exc).__name__


def joined(*parts: str | None) -> str | None:
    return "; ".join(p for p in parts if p) or None


def new_id(kind: str) -> str:
    # 48 random bits: unique across processes in practice (the store's primary key catches the
    # rest) and not enumerable by another owner.
    return f"{kind}-{secrets.token_hex(6)}"
