"""Value types of the job registry: status, outcome, snapshot, done event, config."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "TERMINAL_STATUSES",
    "JobDone",
    "JobOutcome",
    "JobOwner",
    "JobSnapshot",
    "JobStatus",
    "JobsConfig",
    "completion_notice",
    "status_line",
]


class JobStatus(StrEnum):
    """``running → stopping → completed | killed | failed``; the last three are final."""

    RUNNING = "running"
    STOPPING = "stopping"
    COMPLETED = "completed"
    KILLED = "killed"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES: frozenset[JobStatus] = frozenset(
    {JobStatus.COMPLETED, JobStatus.KILLED, JobStatus.FAILED}
)


class JobOwner(Protocol):
    """Anything with a ``session_id`` (a ``dsh.tool_subagent.Caller``, say) owns jobs."""

    @property
    def session_id(self) -> str: ...


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """What a job's work returns. ``status`` must be terminal."""

    status: JobStatus
    detail: str | None = None
    output: str | None = None

    def __post_init__(self) -> None:
        status = JobStatus(self.status)
        if not status.terminal:
            raise ValueError(f"JobOutcome.status must be completed, killed or failed, not {status}")
        object.__setattr__(self, "status", status)


@dataclass(frozen=True, slots=True)
class JobSnapshot:
    """A point-in-time copy of one job's record."""

    id: str
    kind: str
    label: str
    owner_session: str | None
    status: JobStatus
    detail: str | None
    started_at: datetime
    finished_at: datetime | None
    reported: bool

    @property
    def terminal(self) -> bool:
        return self.status.terminal

    @property
    def status_line(self) -> str:
        return status_line(self.status, self.detail)


@dataclass(frozen=True, slots=True)
class JobDone:
    """Delivered to ``on_job_done`` listeners once a job settles.

    ``notice`` is the completion notice to pass to the owner, or ``None`` when none is due (the
    job was already reported, was killed, was waited to completion, or has no owner).
    """

    snapshot: JobSnapshot
    notice: str | None


def status_line(status: JobStatus | str, detail: str | None = None) -> str:
    """``[status: <status>]`` or ``[status: <status>, <detail>]``."""
    if detail:
        return f"[status: {status}, {detail}]"
    return f"[status: {status}]"


def completion_notice(snapshot: JobSnapshot) -> str:
    """The text sent to a job's owner when it finishes unreported."""
    return (
        f"background job {snapshot.id} ({snapshot.kind}: {snapshot.label}) finished "
        f"{snapshot.status_line}. Read its output with job_output."
    )


class JobsConfig(BaseModel):
    """The ``[jobs]`` table of a profile."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_concurrent_jobs_per_owner: int = Field(default=10, ge=1)
    wait_timeout_ms: float = Field(default=30000, gt=0)
    max_wait_timeout_ms: float = Field(default=600000, gt=0)

    @model_validator(mode="after")
    def _wait_within_max(self) -> JobsConfig:
        if self.wait_timeout_ms > self.max_wait_timeout_ms:
            raise ValueError("wait_timeout_ms must not exceed max_wait_timeout_ms")
        return self
