"""Value types of the job registry: status, outcome, snapshot, done event, config."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "MAX_RUNS_PER_NODE",
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
    """``queued → running → stopping → completed | killed | failed``; the last three are final.

    ``queued`` is a started job waiting for capacity on an executor that queues (the Ray
    executor's per-node limit); a local job starts ``running``. A queued job may be killed
    (``stopping``, then ``killed``) without ever running.
    """

    QUEUED = "queued"
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
    """What a job's work returns. ``status`` must be terminal.

    ``meta`` holds host-only facts (a delegation's ``usage`` and ``timings``, JSON values): the
    job's snapshot keeps them for the host and no model-visible text includes them.
    """

    status: JobStatus
    detail: str | None = None
    output: str | None = None
    meta: Mapping[str, Any] | None = field(default=None, compare=False)

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
    #: Where the work runs or ran, as the executor names it (a Ray node id), or ``None``.
    where: str | None = None
    #: The settled work's host-only facts (``JobOutcome.meta``), or ``None``; never model-visible.
    meta: Mapping[str, Any] | None = field(default=None, compare=False)

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


#: The largest ``max_runs_per_node``: the limit is a fractional Ray resource of 4 decimals, which
#: counts exactly up to 99 runs per node (a product run costs 0.3-0.5 GB, so 64 is plenty).
MAX_RUNS_PER_NODE = 64
_ADDRESS = re.compile(r"(ray://)?[A-Za-z0-9._-]+:[0-9]{1,5}")
_SCOPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_CALLABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")


class JobsConfig(BaseModel):
    """The ``[jobs]`` table of a profile."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_concurrent_jobs_per_owner: int = Field(default=10, ge=1)
    wait_timeout_ms: float = Field(default=30000, gt=0)
    max_wait_timeout_ms: float = Field(default=600000, gt=0)
    #: Where jobs run: ``local`` (this process) or ``ray`` (a Ray cluster; ``dsh-jobs[ray]``).
    executor: Literal["local", "ray"] = "local"
    #: The Ray cluster (``executor = "ray"`` only): ``auto`` (``RAY_ADDRESS`` or the cluster
    #: started on this machine), ``ray://host:port`` (Ray Client) or a GCS ``host:port``.
    address: str | None = None
    #: At most this many jobs run at once on each Ray node (``executor = "ray"`` only).
    max_runs_per_node: int | None = Field(default=None, ge=1, le=MAX_RUNS_PER_NODE, strict=True)
    #: ``"package.module:function"`` names each Ray worker process calls (no argument) when it
    #: starts, after dsh's own steps: the deployment's setup there, e.g. the OpenTelemetry SDK
    #: (dsh configures none itself). ``executor = "ray"`` only.
    worker_setup: tuple[str, ...] = ()
    #: Where job records live: ``"default"`` (the OS user's SQLite file,
    #: ``$XDG_STATE_HOME/dsh/jobs.sqlite3``), ``"memory"`` (this process only) or a file path.
    store: str = Field(default="default", min_length=1)
    #: Finished records are kept this many days, and at most ``retention_count`` of them.
    retention_days: float = Field(default=7.0, gt=0)
    retention_count: int = Field(default=1000, ge=1, strict=True)
    #: ``true``: a ``dsh mcp`` connection's close leaves its running jobs running (each in a
    #: detached dsh process) for a later session of the same ``scope``; ``false``: they are killed.
    keep_on_close: bool = False
    #: The owner scope of ``dsh mcp`` sessions: ``None`` gives every connection an owner of its
    #: own; a name makes every session served with this profile (same OS user and store) one owner.
    scope: str | None = None
    #: How long ``job_kill`` waits for a job's processes to exit before it answers.
    kill_wait_ms: float = Field(default=30000, gt=0)

    @field_validator("scope")
    @classmethod
    def _scope_name(cls, value: str | None) -> str | None:
        if value is None or _SCOPE.fullmatch(value):
            return value
        raise ValueError("must be 1-64 letters, digits, '.', '_' or '-', starting alphanumeric")

    @field_validator("worker_setup")
    @classmethod
    def _callable_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not _CALLABLE.fullmatch(name):
                raise ValueError(f'{name!r} is not a "package.module:function" name')
        return value

    @field_validator("address")
    @classmethod
    def _address_form(cls, value: str | None) -> str | None:
        if value is None or value == "auto" or _ADDRESS.fullmatch(value):
            return value
        raise ValueError('must be "auto", "ray://<host>:<port>" or "<host>:<port>"')

    @model_validator(mode="after")
    def _consistent(self) -> JobsConfig:
        if self.wait_timeout_ms > self.max_wait_timeout_ms:
            raise ValueError("wait_timeout_ms must not exceed max_wait_timeout_ms")
        if self.keep_on_close and self.executor != "local":
            raise ValueError('keep_on_close needs executor = "local"')
        if self.keep_on_close and self.store == "memory":
            raise ValueError('keep_on_close needs a file store, not store = "memory"')
        if self.executor != "ray":
            for name in ("address", "max_runs_per_node", "worker_setup"):
                if getattr(self, name) not in (None, ()):
                    raise ValueError(f'{name} is a setting of executor = "ray"')
        return self
