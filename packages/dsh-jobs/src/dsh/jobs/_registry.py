"""The job registry: ids, states, owners, admission, waits, kill, close and done listeners.

A job's record lives in the registry's :class:`~dsh.jobs._store.JobStore`; the registry keeps in
memory only what runs here (a live job's task and waiters) and a settled job until its record
is durable. Every read that misses memory goes to the store, so a job started by another
process (a detached run, an earlier session of the same owner) reads the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from dsh.jobs._executor import Executor, JobWork, PortableWork
from dsh.jobs._executor_choice import executor_for
from dsh.jobs._holder import this_process
from dsh.jobs._job import (
    CURRENT_JOB,
    Job,
    JobOverview,
    new_id,
    session_of,
    snapshot_of,
)
from dsh.jobs._overview import overview_of
from dsh.jobs._pending_flags import PendingFlags
from dsh.jobs._settlement import settlement_of
from dsh.jobs._sqlite_store import SqliteJobStore
from dsh.jobs._store import JobRecord, JobStore, RecordFilter
from dsh.jobs._store_choice import store_for
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
    JobLimitError,
    JobRegistryClosedError,
    UnknownJobError,
)

__all__ = ["JobRegistry", "JobWork"]

logger = logging.getLogger("dsh.jobs")

JobDoneListener = Callable[[JobDone], object]

#: How often a wait on a job that another process holds reads the store again.
REMOTE_POLL_S = 0.2
#: The reason recorded when another process (``dsh jobs kill``) stopped a job held here.
OUTSIDE_KILL_REASON = "stopped by dsh jobs kill"


class JobRegistry:
    """Owns background jobs. Use as ``async with JobRegistry() as jobs`` or call :meth:`aclose`.

    Settlement always happens once the job's task has ended (its work has returned or raised),
    so a job whose work tears a process tree down settles only after that tree is gone.

    ``executor`` runs each job's work (default: the one ``config.executor`` names, built by
    :func:`~dsh.jobs.executor_for`); the registry closes it in :meth:`aclose`. ``store`` keeps
    the records (default: the one ``config.store`` names, opened at first use, or by
    :meth:`open_store`); the registry closes it in :meth:`aclose`.
    """

    def __init__(
        self,
        config: JobsConfig | None = None,
        *,
        executor: Executor | None = None,
        store: JobStore | None = None,
    ) -> None:
        self.config = config if config is not None else JobsConfig()
        self.executor = executor if executor is not None else executor_for(self.config)
        self._store = store
        if store is not None:
            self.executor.attach(store)
        self._origin = secrets.token_hex(8)
        self._jobs: dict[str, Job] = {}
        self._listeners: list[JobDoneListener] = []
        self._flags = PendingFlags(self.open_store)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    # -- the store --------------------------------------------------------------------------

    def open_store(self) -> JobStore:
        """The registry's store, opened now if it was not yet. Raises
        :class:`~dsh.jobs.errors.JobStoreError` (naming the path) when it cannot be used."""
        if self._store is None:
            self._store = store_for(self.config)
            self.executor.attach(self._store)
        store = self._store
        if isinstance(store, SqliteJobStore) and store.kill_listener is None:
            store.kill_holder = this_process()
            store.holding = self._live_count
            store.kill_listener = self._kills_from_outside
        return store

    @property
    def store(self) -> JobStore:
        return self.open_store()

    def _live_count(self) -> int:
        return sum(1 for job in list(self._jobs.values()) if not job.done.is_set())

    def _kills_from_outside(self, ids: list[str]) -> None:
        """Kill requests another process wrote for jobs held here (on the store's thread)."""
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._kill_ids, ids)

    def _kill_ids(self, ids: list[str]) -> None:
        for job_id in ids:
            job = self._jobs.get(job_id)
            if job is not None and not job.done.is_set():
                self._request_kill(job, OUTSIDE_KILL_REASON)

    # -- starting ---------------------------------------------------------------------------

    def start(self, kind: str, label: str, owner: JobOwner | None, work: JobWork) -> str:
        """Start ``work`` as a job and return its id. Rejections raise before ``work`` runs."""
        if self._closed:
            raise JobRegistryClosedError()
        if not kind or not kind.strip():
            raise JobArgumentError("job kind must be non-empty")
        if not label or not label.strip():
            raise JobArgumentError("job label must be non-empty")
        session = session_of(owner)
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
        store = self.open_store()
        self._loop = loop
        job_id = new_id(kind)
        while job_id in self._jobs:
            job_id = new_id(kind)
        job = Job(
            id=job_id,
            kind=kind,
            label=label,
            owner_session=session,
            started_at=time.time(),
            origin=self._origin,
            status=JobStatus.QUEUED if self.executor.queues else JobStatus.RUNNING,
        )
        stored_work = None
        if self.executor.runs_from_store and isinstance(work, PortableWork):
            stored_work = work.to_json()
        store.insert(job.record(stored_work))
        task = loop.create_task(self._run(job, work), name=f"dsh.jobs:{job.id}")
        job.task = task
        self._jobs[job.id] = job
        task.add_done_callback(functools.partial(self._on_task_done, job))
        return job.id

    def adopt(self, record: JobRecord, work: JobWork) -> str:
        """Run ``work`` here as the job ``record`` describes, a record another process started
        and this one has claimed (:meth:`JobStore.claim`): a detached worker's one job. No
        admission check and no new record; the settlement is written as usual."""
        if self._closed:
            raise JobRegistryClosedError()
        self.open_store()
        loop = asyncio.get_running_loop()
        self._loop = loop
        job = Job(
            id=record.id,
            kind=record.kind,
            label=record.label,
            owner_session=record.owner,
            started_at=record.started_at,
            origin=record.origin,
            status=JobStatus.RUNNING,
        )
        if record.status is not JobStatus.RUNNING:
            self.store.update(job.id, {"status": str(JobStatus.RUNNING)})
        task = loop.create_task(self._run(job, work), name=f"dsh.jobs:{job.id}")
        job.task = task
        self._jobs[job.id] = job
        task.add_done_callback(functools.partial(self._on_task_done, job))
        return job.id

    async def _run(self, job: Job, work: JobWork) -> JobOutcome:
        CURRENT_JOB.set(job)  # the job task's own context: its work can tell its id
        job.persist = functools.partial(self.store.update, job.id)

        def started(where: str | None) -> None:
            job.began.set()
            job.where = where
            changes: dict[str, Any] = {}
            if where is not None:
                changes["where"] = where
            if job.status is JobStatus.QUEUED:
                job.status = JobStatus.RUNNING
                changes["status"] = str(JobStatus.RUNNING)
            if changes:
                self.store.update(job.id, changes)

        outcome = await self.executor.execute(work, started)
        if not isinstance(outcome, JobOutcome):
            raise TypeError("job work must return a JobOutcome")
        return outcome

    def _on_task_done(self, job: Job, task: asyncio.Task[JobOutcome]) -> None:
        if job.done.is_set():
            return
        status, detail, output = settlement_of(job, task)
        self._settle(job, status, detail, output)

    def _settle(self, job: Job, status: JobStatus, detail: str | None, output: str) -> None:
        if job.detached:
            # Let go, still running in a process of its own: that process settles the record.
            job.done.set()
            self._jobs.pop(job.id, None)
            return
        job.status = status
        job.detail = detail or None
        job.output = output
        job.finished_at = time.time()
        if job.waiters > 0:
            job.reported = True
        job.done.set()  # waiters are released before any listener runs
        job.settled_flags = (job.reported, job.noticed)
        self.store.settle(job.record(), functools.partial(self._durable, job))
        snapshot = snapshot_of(job.record())
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

    def _durable(self, job: Job) -> None:
        """The settled record is in the store: memory may let the job go (any thread)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            self._forget(job)
            return
        try:
            loop.call_soon_threadsafe(self._forget, job)
        except RuntimeError:
            self._forget(job)

    def _forget(self, job: Job) -> None:
        if self._jobs.get(job.id) is job:
            del self._jobs[job.id]
            if job.settled_flags != (job.reported, job.noticed):
                # A read since the settlement follows the job into the store.
                self._flags.flag(job.id, {"reported": job.reported, "noticed": job.noticed})

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
        that this registry ran, not already taken here. ``JobDone.notice`` is the push form; a
        host uses one of the two.

        A host that delivers notices between model turns calls this; a job the model already
        read, waited to completion or killed by then yields none.
        """
        session = session_of(caller)
        if session is None:
            return []
        # Only the few records a notice is still due for are read, not the owner's history.
        where = RecordFilter(owner=session, live=False, unnoticed=True)
        due = {r.id: r for r in self._flags.seen(lambda: self.store.newest(where, 1 << 16))}
        for held in self._jobs.values():
            if held.owner_session == session and held.done.is_set():
                due[held.id] = held.record()
        notices = []
        for record in sorted(due.values(), key=lambda r: r.started_at):
            if record.origin != self._origin or record.reported or record.noticed:
                continue
            job = self._jobs.get(record.id)
            if job is not None:
                job.noticed = True
            else:
                self._flags.flag(record.id, {"noticed": True})
            notices.append(completion_notice(snapshot_of(record)))
        return notices

    # -- access -----------------------------------------------------------------------------

    def _stored(self, job_id: str) -> JobRecord | None:
        found = self._flags.seen(lambda: [r for r in [self.store.get(job_id)] if r is not None])
        return found[0] if found else None

    def _find(self, job_id: str, caller: JobOwner | None) -> tuple[Job | None, JobRecord]:
        """The job in memory (if it is here) and its record; unknown and foreign both raise
        an error whose text is ``unknown job <id>``."""
        job = self._jobs.get(job_id)
        record = job.record() if job is not None else self._stored(job_id)
        if record is None:
            raise UnknownJobError(job_id)
        session = session_of(caller)
        if record.owner is None:
            if record.origin != self._origin:
                raise ForeignJobError(job_id)
        elif record.owner != session:
            raise ForeignJobError(job_id)
        return job, record

    def _records_of(self, session: str | None, *, live: bool | None = None) -> list[JobRecord]:
        """The session's records and the unowned ones this registry started, in start order:
        the store's, with memory's newer copies of the jobs still here."""
        where = RecordFilter(owner=session or "", origin=self._origin, live=live)
        stored = {r.id: r for r in self._flags.seen(lambda: self.store.newest(where, 1 << 30))}
        for job in self._jobs.values():
            if job.owner_session in (session, None):
                record = job.record()
                if live is None or live != record.terminal:
                    stored[job.id] = record
                else:
                    stored.pop(job.id, None)
        return sorted(stored.values(), key=lambda r: r.started_at)

    def list(self, caller: JobOwner | None) -> list[JobSnapshot]:
        """The caller's jobs plus the unowned ones this registry started, in start order,
        from every process that shares the store (up to its retention)."""
        return [snapshot_of(r) for r in self._records_of(session_of(caller))]

    def overview(self, caller: JobOwner | None, finished_limit: int) -> JobOverview:
        """The caller's live jobs (oldest first) and its ``finished_limit`` newest finished
        ones (newest first), plus how many finished ones that leaves out; bounded reads.

        The jobs held in memory here are read from memory and left out of the store's page
        and count, so a settlement written between two reads is never counted twice.
        """
        session = session_of(caller)
        mine = [job for job in self._jobs.values() if job.owner_session in (session, None)]
        return overview_of(
            mine, self.store, self._flags, session or "", self._origin, finished_limit
        )

    def get(self, job_id: str, caller: JobOwner | None) -> JobSnapshot:
        return snapshot_of(self._find(job_id, caller)[1])

    def read(self, job_id: str, caller: JobOwner | None) -> str:
        """The final output once terminal (``""`` while live). A terminal read marks it reported."""
        job, record = self._find(job_id, caller)
        if not record.terminal:
            return ""
        if job is not None:
            job.reported = True
        elif not record.reported:
            self._flags.flag(job_id, {"reported": True})
        return record.output

    def kill(self, job_id: str, caller: JobOwner | None, reason: str | None = None) -> str:
        """Request cancellation: ``"requested"`` (now ``stopping``) or ``"already-finished"``.

        A job another process holds is asked to stop through the store; that process kills it
        within about half a second."""
        job, record = self._find(job_id, caller)
        if record.terminal:
            return "already-finished"
        if job is None:
            self._flags.flag(job_id, {"kill_requested": True, "reported": True})
            return "requested"
        job.reported = True
        self._request_kill(job, reason)
        return "requested"

    def _request_kill(self, job: Job, reason: str | None) -> None:
        if not job.kill_requested:
            job.kill_requested = True
            job.kill_reason = reason or None
            job.status = JobStatus.STOPPING
            if job.task is not None:
                job.task.cancel(reason)

    async def wait(self, job_id: str, timeout_s: float, caller: JobOwner | None) -> JobSnapshot:
        """The snapshot at settlement, or at timeout (not an error). ``timeout_s`` must be > 0."""
        if isinstance(timeout_s, bool) or not (timeout_s > 0) or math.isnan(timeout_s):
            raise JobArgumentError("wait timeout must be a positive number of seconds")
        job, record = self._find(job_id, caller)
        if job is None:
            return await self._wait_stored(record, timeout_s)
        if job.done.is_set():
            job.reported = True
            return snapshot_of(job.record())
        job.waiters += 1
        try:
            async with asyncio.timeout(None if math.isinf(timeout_s) else timeout_s):
                await job.done.wait()
        except TimeoutError:
            pass
        finally:
            job.waiters -= 1
        return snapshot_of(job.record())

    async def _wait_stored(self, record: JobRecord, timeout_s: float) -> JobSnapshot:
        """Wait for a job another process holds, reading the store (bounded reads)."""
        deadline = time.monotonic() + timeout_s
        while not record.terminal and time.monotonic() < deadline:
            await asyncio.sleep(min(REMOTE_POLL_S, max(0.0, deadline - time.monotonic())))
            record = self._stored(record.id) or record
        if record.terminal and not record.reported:
            self._flags.flag(record.id, {"reported": True})
            record = replace(record, reported=True)
        return snapshot_of(record)

    async def join(self, job_id: str) -> JobSnapshot:
        """Wait for a job this registry holds to settle, whoever owns it (for the host, not a
        model: no access check, and the job is not marked reported)."""
        job = self._jobs.get(job_id)
        if job is None:
            record = self._stored(job_id)
            if record is None:
                raise UnknownJobError(job_id)
            return snapshot_of(record)
        await job.done.wait()
        return snapshot_of(job.record())

    async def stop(
        self, job_id: str, caller: JobOwner | None, reason: str | None, timeout_s: float
    ) -> tuple[str, JobSnapshot]:
        """:meth:`kill`, then wait up to ``timeout_s`` for the job to settle (its processes
        gone); returns the kill's answer and the snapshot at settlement or at timeout."""
        result = self.kill(job_id, caller, reason)
        if result == "already-finished":
            return result, self.get(job_id, caller)
        return result, await self.wait(job_id, timeout_s, caller)

    # -- closing ----------------------------------------------------------------------------

    async def close_owner(self, owner: JobOwner | None) -> None:
        """Cancel the owner's live jobs here (no notice) and await their exit. Their records
        stay in the store (``killed``, with the facts gathered until then).

        A job already killed is not cancelled again (a second cancel would cut short the close
        its work runs after the first); this waits for it like for the others. Cancelling the
        caller does not cut the wait short: it re-raises once every covered job has settled.
        """
        session = session_of(owner)
        await self._close(job for job in self._jobs.values() if job.owner_session == session)

    async def detach_owner(self, owner: JobOwner | None) -> None:
        """Let the owner's live jobs go on without this registry, where the executor runs each
        in a process of its own (``Executor.detaches``); kill the others as :meth:`close_owner`
        does. A detached job's process records its outcome itself."""
        session = session_of(owner)
        mine = [j for j in self._jobs.values() if j.owner_session == session]
        if self.executor.detaches:
            for job in mine:
                # A job let go before its executor began would never run: its process must
                # exist first (the executor's start is quick and bounded).
                if not job.began.is_set() and not job.done.is_set():
                    began = asyncio.ensure_future(job.began.wait())
                    done = asyncio.ensure_future(job.done.wait())
                    await asyncio.wait({began, done}, return_when=asyncio.FIRST_COMPLETED)
                    began.cancel()
                    done.cancel()
                if not job.done.is_set() and not job.kill_requested:
                    job.detached = True
                    if job.task is not None:
                        job.task.cancel("job owner detached")
        await self._close(mine)

    async def aclose(self) -> None:
        """Refuse new jobs, cancel every live job (no notice), await them, then close the
        executor and the store (queued writes are made durable first)."""
        self._closed = True
        try:
            await self._close(self._jobs.values())
        finally:
            try:
                await self.executor.aclose()
            finally:
                await self._close_store()

    async def _close_store(self) -> None:
        store = self._store
        if store is None:
            return
        close = asyncio.ensure_future(asyncio.to_thread(store.close))
        try:
            await asyncio.shield(close)
        except asyncio.CancelledError:
            await close  # the close is bounded: it writes what is queued, then returns
            raise

    async def _close(self, selected: Iterable[Job]) -> None:
        jobs = list(selected)
        for job in jobs:
            if not job.done.is_set():
                job.reported = True
                if not job.kill_requested and not job.detached:
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
        if cancelled is not None:
            raise cancelled

    async def __aenter__(self) -> JobRegistry:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def closed(self) -> bool:
        return self._closed
