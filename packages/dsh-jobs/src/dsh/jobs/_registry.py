"""The job registry: ids, states, owners, admission, waits, kill, close and done listeners."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dsh.jobs._executor import Executor, JobWork, PortableWork
from dsh.jobs._executor_choice import executor_for
from dsh.jobs._types import (
    JobDone,
    JobOutcome,
    JobOwner,
    JobsConfig,
    JobSnapshot,
    JobStatus,
    completion_notice,
)
from dsh.jobs.errors import (
    ForeignJobError,
    JobArgumentError,
    JobExecutorError,
    JobLimitError,
    JobRegistryClosedError,
    UnknownJobError,
)

__all__ = ["JobRegistry", "JobWork", "attach_job_meta", "current_job_id"]

logger = logging.getLogger("dsh.jobs")

JobDoneListener = Callable[[JobDone], object]


@dataclass(eq=False)
class _Job:
    id: str
    kind: str
    label: str
    owner_session: str | None
    started_at: datetime
    status: JobStatus = JobStatus.RUNNING
    detail: str | None = None
    output: str = ""
    finished_at: datetime | None = None
    reported: bool = False
    kill_requested: bool = False
    kill_reason: str | None = None
    waiters: int = 0
    noticed: bool = False
    where: str | None = None
    meta: Mapping[str, Any] | None = None
    task: asyncio.Task[JobOutcome] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def snapshot(self) -> JobSnapshot:
        return JobSnapshot(
            id=self.id,
            kind=self.kind,
            label=self.label,
            owner_session=self.owner_session,
            status=self.status,
            detail=self.detail,
            started_at=self.started_at,
            finished_at=self.finished_at,
            reported=self.reported,
            where=self.where,
            meta=self.meta,
        )


_CURRENT_JOB: contextvars.ContextVar[_Job | None] = contextvars.ContextVar(
    "dsh.jobs.current_job", default=None
)


def current_job_id() -> str | None:
    """The id of the job whose work is running in this task (``None`` outside a job's work).

    Set where the registry runs the work, so work run in this process (``LocalExecutor``) sees
    it; work an executor runs elsewhere does not.
    """
    job = _CURRENT_JOB.get()
    return job.id if job is not None else None


def attach_job_meta(meta: Mapping[str, Any]) -> bool:
    """Keep ``meta`` as the host-only facts of the job whose work runs in this task.

    For work that ends by raising (a killed job's cancellation), which returns no
    :class:`JobOutcome` to carry them; an outcome's own ``meta`` replaces them. Returns whether
    a job was there to take them (not outside a job's work, nor on a remote executor's worker).
    """
    job = _CURRENT_JOB.get()
    if job is None:
        return False
    job.meta = dict(meta)
    return True


def _session_of(owner: JobOwner | None) -> str | None:
    return None if owner is None else owner.session_id


def _safe_exception_detail(exc: BaseException) -> str:
    if isinstance(exc, JobExecutorError):
        return str(exc)  # built by dsh from fixed words: safe by construction
    # Only the type name: the registry cannot know whether an exception's text is safe for a
    # model (it may carry paths, env values or product text). The text goes to the DEBUG log.
    return type(exc).__name__


def _joined(*parts: str | None) -> str | None:
    return "; ".join(p for p in parts if p) or None


class JobRegistry:
    """Owns background jobs. Use as ``async with JobRegistry() as jobs`` or call :meth:`aclose`.

    Settlement always happens once the job's task has ended (its work has returned or raised),
    so a job whose work tears a process tree down settles only after that tree is gone.

    ``executor`` runs each job's work (default: the one ``config.executor`` names, built by
    :func:`~dsh.jobs.executor_for`); the registry closes it in :meth:`aclose`.
    """

    def __init__(
        self, config: JobsConfig | None = None, *, executor: Executor | None = None
    ) -> None:
        self.config = config if config is not None else JobsConfig()
        self.executor = executor if executor is not None else executor_for(self.config)
        self._jobs: dict[str, _Job] = {}
        self._counters: dict[str, int] = {}
        self._listeners: list[JobDoneListener] = []
        self._closed = False

    # -- starting ---------------------------------------------------------------------------

    def start(self, kind: str, label: str, owner: JobOwner | None, work: JobWork) -> str:
        """Start ``work`` as a job and return its id. Rejections raise before ``work`` runs."""
        if self._closed:
            raise JobRegistryClosedError()
        if not kind or not kind.strip():
            raise JobArgumentError("job kind must be non-empty")
        if not label or not label.strip():
            raise JobArgumentError("job label must be non-empty")
        session = _session_of(owner)
        limit = self.config.max_concurrent_jobs_per_owner
        live = sum(
            1
            for job in self._jobs.values()
            if job.owner_session == session and not job.done.is_set()
        )
        if live >= limit:
            raise JobLimitError(limit)
        if self.executor.portable and not isinstance(work, PortableWork):
            raise JobArgumentError(
                f"the {self.executor.name} executor runs only portable work (a PortableWork)"
            )
        loop = asyncio.get_running_loop()
        number = self._counters.get(kind, 0) + 1
        job = _Job(
            id=f"{kind}-{number}",
            kind=kind,
            label=label,
            owner_session=session,
            started_at=datetime.now(UTC),
            status=JobStatus.QUEUED if self.executor.queues else JobStatus.RUNNING,
        )
        task = loop.create_task(self._run(job, work), name=f"dsh.jobs:{job.id}")
        self._counters[kind] = number
        job.task = task
        self._jobs[job.id] = job
        task.add_done_callback(functools.partial(self._on_task_done, job))
        return job.id

    async def _run(self, job: _Job, work: JobWork) -> JobOutcome:
        _CURRENT_JOB.set(job)  # the job task's own context: its work can tell its id

        def started(where: str | None) -> None:
            job.where = where
            if job.status is JobStatus.QUEUED:
                job.status = JobStatus.RUNNING

        outcome = await self.executor.execute(work, started)
        if not isinstance(outcome, JobOutcome):
            raise TypeError("job work must return a JobOutcome")
        return outcome

    def _on_task_done(self, job: _Job, task: asyncio.Task[JobOutcome]) -> None:
        if job.done.is_set():
            return
        status: JobStatus
        detail: str | None
        output = ""
        if task.cancelled():
            status, detail = JobStatus.KILLED, job.kill_reason
        elif (exc := task.exception()) is not None:
            logger.debug("job %s work raised", job.id, exc_info=exc)
            if job.kill_requested:
                status, detail = (
                    JobStatus.KILLED,
                    _joined(job.kill_reason, _safe_exception_detail(exc)),
                )
            else:
                status, detail = JobStatus.FAILED, _safe_exception_detail(exc)
        else:
            outcome = task.result()
            if outcome.meta is not None:
                job.meta = dict(outcome.meta)
            if job.kill_requested and outcome.status is not JobStatus.KILLED:
                status, detail = JobStatus.KILLED, job.kill_reason
            elif job.kill_requested:
                # The work's own facts about the kill (a failed teardown, say) follow the reason.
                status, detail = JobStatus.KILLED, _joined(job.kill_reason, outcome.detail)
                output = outcome.output or ""
            else:
                status, detail, output = outcome.status, outcome.detail, outcome.output or ""
        self._settle(job, status, detail, output)

    def _settle(self, job: _Job, status: JobStatus, detail: str | None, output: str) -> None:
        job.status = status
        job.detail = detail or None
        job.output = output
        job.finished_at = datetime.now(UTC)
        if job.waiters > 0:
            job.reported = True
        job.done.set()  # waiters are released before any listener runs
        snapshot = job.snapshot()
        notice = None
        if not job.reported and job.owner_session is not None:
            notice = completion_notice(snapshot)
        event = JobDone(snapshot=snapshot, notice=notice)
        for listener in tuple(self._listeners):
            try:
                listener(event)
            except Exception:
                logger.warning("a job-done listener raised for job %s", job.id)
                logger.debug("job-done listener failure", exc_info=True)

    # -- listeners --------------------------------------------------------------------------

    def on_job_done(self, listener: JobDoneListener) -> Callable[[], None]:
        """Call ``listener(JobDone)`` after every settlement; returns an unsubscribe function.

        Listeners run last (after state is recorded and waiters are released), synchronously
        on the event loop; one that raises is logged and does not affect the job or others.
        """
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def take_notices(self, caller: JobOwner | None) -> list[str]:
        """Pull form of the completion notices: one per settled, unreported job of ``caller``
        not already taken here. ``JobDone.notice`` is the push form; a host uses one of the two.

        A host that delivers notices between model turns calls this; a job the model already
        read, waited to completion or killed by then yields none.
        """
        session = _session_of(caller)
        notices = []
        for job in self._jobs.values():
            if (
                job.done.is_set()
                and session is not None
                and job.owner_session == session
                and not job.reported
                and not job.noticed
            ):
                job.noticed = True
                notices.append(completion_notice(job.snapshot()))
        return notices

    # -- access -----------------------------------------------------------------------------

    def _access(self, job_id: str, caller: JobOwner | None) -> _Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise UnknownJobError(job_id)
        if job.owner_session is not None and job.owner_session != _session_of(caller):
            raise ForeignJobError(job_id)
        return job

    def list(self, caller: JobOwner | None) -> list[JobSnapshot]:
        """The caller's jobs plus unowned ones, in start order."""
        session = _session_of(caller)
        return [
            job.snapshot()
            for job in self._jobs.values()
            if job.owner_session is None or job.owner_session == session
        ]

    def get(self, job_id: str, caller: JobOwner | None) -> JobSnapshot:
        return self._access(job_id, caller).snapshot()

    def read(self, job_id: str, caller: JobOwner | None) -> str:
        """The final output once terminal (``""`` while live). A terminal read marks it reported."""
        job = self._access(job_id, caller)
        if not job.done.is_set():
            return ""
        job.reported = True
        return job.output

    def kill(self, job_id: str, caller: JobOwner | None, reason: str | None = None) -> str:
        """Request cancellation: ``"requested"`` (now ``stopping``) or ``"already-finished"``."""
        job = self._access(job_id, caller)
        if job.done.is_set():
            return "already-finished"
        job.reported = True
        if not job.kill_requested:
            job.kill_requested = True
            job.kill_reason = reason or None
            job.status = JobStatus.STOPPING
            if job.task is not None:
                job.task.cancel(reason)
        return "requested"

    async def wait(self, job_id: str, timeout_s: float, caller: JobOwner | None) -> JobSnapshot:
        """The snapshot at settlement, or at timeout (not an error). ``timeout_s`` must be > 0."""
        if isinstance(timeout_s, bool) or not (timeout_s > 0) or math.isnan(timeout_s):
            raise JobArgumentError("wait timeout must be a positive number of seconds")
        job = self._access(job_id, caller)
        if job.done.is_set():
            job.reported = True
            return job.snapshot()
        job.waiters += 1
        try:
            async with asyncio.timeout(None if math.isinf(timeout_s) else timeout_s):
                await job.done.wait()
        except TimeoutError:
            pass
        finally:
            job.waiters -= 1
        return job.snapshot()

    # -- closing ----------------------------------------------------------------------------

    async def close_owner(self, owner: JobOwner | None) -> None:
        """Cancel the owner's live jobs (no notice), await their exit, and drop their records.

        A job already killed is not cancelled again (a second cancel would cut short the close
        its work runs after the first); this waits for it like for the others. Cancelling the
        caller does not cut the wait short: it re-raises once every covered job has settled.
        """
        session = _session_of(owner)
        await self._close(job for job in self._jobs.values() if job.owner_session == session)

    async def aclose(self) -> None:
        """Refuse new jobs, cancel every live job (no notice), await them, drop every record,
        then close the executor."""
        self._closed = True
        try:
            await self._close(self._jobs.values())
        finally:
            await self.executor.aclose()

    async def _close(self, selected: Iterable[_Job]) -> None:
        jobs = list(selected)
        for job in jobs:
            if not job.done.is_set():
                job.reported = True
                if not job.kill_requested:
                    job.kill_requested = True
                    job.status = JobStatus.STOPPING
                    if job.task is not None:
                        job.task.cancel("job owner closed")
        # Settlement follows the task's end (its work's teardown included). A caller cancelled
        # meanwhile keeps waiting for it (each work's close is bounded), then re-raises: a close
        # never ends while a job it covers is still tearing down.
        cancelled: asyncio.CancelledError | None = None
        for job in jobs:
            while not job.done.is_set():
                try:
                    await job.done.wait()
                except asyncio.CancelledError as error:
                    cancelled = cancelled or error
        for job in jobs:
            self._jobs.pop(job.id, None)
        if cancelled is not None:
            raise cancelled

    async def __aenter__(self) -> JobRegistry:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def closed(self) -> bool:
        return self._closed
