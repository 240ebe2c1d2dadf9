"""The job store seam: one record per job, kept beyond the process that ran it.

:class:`JobStore` is what the registry writes (a job's start, its settlement, a read) and what
any process reads (``dsh jobs``, a later session of the same owner). Two stores ship:
:class:`MemoryJobStore` (this process only; ``[jobs] store = "memory"``) and
``SqliteJobStore`` (one file per OS user, the default; :mod:`dsh.jobs._sqlite_store`).

The contract every store keeps:

- **Writes are asynchronous and ordered.** ``insert``, ``settle``, ``mark_reported`` and
  ``request_kill`` return at once (a store with a file queues them to one writer thread, so no
  event loop waits on a disk); ``done`` callbacks run, on that thread, once the write is
  durable. :meth:`JobStore.flush` waits for every queued write.
- **The first settlement wins**, across processes: ``settle`` changes only a record that is
  not yet terminal.
- **Reads are synchronous** and cheap (indexed); they see every durable write of any process.
- **Retention**: finished records older than ``retention_days`` or beyond the newest
  ``retention_count`` are pruned, automatically and in bulk, never one by one.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from dsh.jobs._holder import Holder, alive, this_process
from dsh.jobs._types import TERMINAL_STATUSES, JobStatus

__all__ = [
    "HOLDER_GONE_DETAIL",
    "JobRecord",
    "JobStore",
    "MemoryJobStore",
    "Order",
    "RecordFilter",
]

#: The detail of a job whose holding process ended before the job settled (a crash, SIGKILL).
HOLDER_GONE_DETAIL = "the process running this job exited before it settled"

Done = Callable[[], None]
Order = Literal["started", "finished"]


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job as stored. Times are seconds since the epoch; ``meta`` holds host-only facts."""

    id: str
    kind: str
    label: str
    owner: str | None
    status: JobStatus
    started_at: float
    holder: Holder
    #: The registry instance that started the job: an unowned job is visible to it alone.
    origin: str = ""
    detail: str | None = None
    output: str = ""
    finished_at: float | None = None
    reported: bool = False
    noticed: bool = False
    where: str | None = None
    meta: Mapping[str, Any] | None = field(default=None, compare=False)
    kill_requested: bool = False
    #: The job's portable work as JSON, kept until it settles, for a detached worker to run.
    work: str | None = field(default=None, repr=False)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


@dataclass(frozen=True, slots=True)
class RecordFilter:
    """Which records a listing returns. ``None`` fields do not filter."""

    owner: str | None = None
    #: With ``owner``: also the unowned records this registry instance started.
    origin: str | None = None
    statuses: Sequence[str] | None = None
    #: Only records started at or after this time (seconds since the epoch).
    since: float | None = None
    live: bool | None = None
    #: Only records neither reported nor noticed (a completion notice is still due).
    unnoticed: bool = False
    #: Leave these ids out (the registry's own copies of them are newer).
    exclude: tuple[str, ...] = ()


def _matches(record: JobRecord, where: RecordFilter) -> bool:
    if where.owner is not None:
        mine = record.owner == where.owner
        unowned_here = record.owner is None and where.origin and record.origin == where.origin
        if not (mine or unowned_here):
            return False
    if where.statuses is not None and str(record.status) not in where.statuses:
        return False
    if where.since is not None and record.started_at < where.since:
        return False
    if where.unnoticed and (record.reported or record.noticed):
        return False
    if record.id in where.exclude:
        return False
    return where.live is None or where.live != record.terminal


def settled_for_gone_holder(record: JobRecord, now: float | None = None) -> JobRecord | None:
    """The record as it truly stands when its holder is gone, or ``None`` if nothing changes.

    A live record whose holding process no longer exists is ``failed`` with
    :data:`HOLDER_GONE_DETAIL`; the facts gathered until then stay.
    """
    if record.terminal or record.holder == this_process() or alive(record.holder):
        return None
    return replace(
        record,
        status=JobStatus.FAILED,
        detail=HOLDER_GONE_DETAIL,
        finished_at=time.time() if now is None else now,
        work=None,
    )


class JobStore(ABC):
    """Where job records live. See the module docstring for the contract."""

    #: A file's path, or ``None`` for a store that lives in this process only.
    path: str | None = None

    def __init__(self, *, retention_days: float = 7.0, retention_count: int = 1000) -> None:
        self.retention_days = retention_days
        self.retention_count = retention_count

    # -- writes (asynchronous, ordered) ----------------------------------------------------

    @abstractmethod
    def insert(self, record: JobRecord, done: Done | None = None) -> None:
        """Add a new record (its id is new)."""

    @abstractmethod
    def settle(self, record: JobRecord, done: Done | None = None) -> None:
        """Write a terminal record's outcome, unless the stored record is already terminal."""

    @abstractmethod
    def update(self, job_id: str, changes: Mapping[str, Any], done: Done | None = None) -> None:
        """Change plain fields (``reported``, ``noticed``, ``kill_requested``, ``where``,
        ``status`` and ``detail`` of a live record, ``holder``) of one record."""

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every queued write is durable; ``False`` on timeout."""
        return True

    @abstractmethod
    def claim(self, job_id: str, holder: Holder) -> JobRecord | None:
        """Make ``holder`` the holder of a live record, now (synchronous, after the queued
        writes); returns the record, or ``None`` when it is missing or already terminal."""

    # -- reads (synchronous) ---------------------------------------------------------------

    @abstractmethod
    def get(self, job_id: str) -> JobRecord | None:
        """One record, or ``None``."""

    @abstractmethod
    def newest(
        self, where: RecordFilter, limit: int, offset: int = 0, *, by: Order = "started"
    ) -> list[JobRecord]:
        """Records matching ``where``, newest first: by start, or (``by="finished"``, for
        finished records) by settlement."""

    @abstractmethod
    def count(self, where: RecordFilter) -> int:
        """How many records match ``where``."""

    @abstractmethod
    def kill_requests(self, holder: Holder) -> list[str]:
        """Ids of live records held by ``holder`` that another process asked to kill."""

    # -- upkeep -----------------------------------------------------------------------------

    @abstractmethod
    def prune(self, now: float | None = None) -> int:
        """Drop finished records past retention now; returns how many went."""

    def correct(self, records: Iterable[JobRecord]) -> list[JobRecord]:
        """``records`` as they truly stand: a live one whose holder is gone is settled
        ``failed`` (and the store is told), the others are returned unchanged."""
        out = []
        for record in records:
            fixed = settled_for_gone_holder(record)
            if fixed is None:
                out.append(record)
                continue
            self.settle(fixed)
            out.append(fixed)
        return out

    def close(self) -> None:  # noqa: B027 - a store without resources keeps the default
        """Write what is queued and release the store's resources. Idempotent."""


class MemoryJobStore(JobStore):
    """Records in this process's memory (``[jobs] store = "memory"``): today's behaviour for
    tests and embedders. Writes are immediate; retention still bounds it."""

    def __init__(self, *, retention_days: float = 7.0, retention_count: int = 1000) -> None:
        super().__init__(retention_days=retention_days, retention_count=retention_count)
        self._records: dict[str, JobRecord] = {}
        self._finished = 0
        self._lock = threading.Lock()

    def insert(self, record: JobRecord, done: Done | None = None) -> None:
        with self._lock:
            if record.id in self._records:
                raise KeyError(record.id)
            self._records[record.id] = record
        if done is not None:
            done()

    def settle(self, record: JobRecord, done: Done | None = None) -> None:
        over = False
        with self._lock:
            stored = self._records.get(record.id)
            if stored is None or not stored.terminal:
                self._records[record.id] = replace(record, work=None)
                self._finished += 1
                # Pruned in bulk, once a tenth over the count: never a sort per settlement.
                over = self._finished > self.retention_count + max(10, self.retention_count // 10)
        if over:
            self.prune()
        if done is not None:
            done()

    def update(self, job_id: str, changes: Mapping[str, Any], done: Done | None = None) -> None:
        with self._lock:
            stored = self._records.get(job_id)
            if stored is not None:
                self._records[job_id] = replace(stored, **changes)
        if done is not None:
            done()

    def get(self, job_id: str) -> JobRecord | None:
        return self._records.get(job_id)

    def claim(self, job_id: str, holder: Holder) -> JobRecord | None:
        with self._lock:
            stored = self._records.get(job_id)
            if stored is None or stored.terminal:
                return None
            self._records[job_id] = claimed = replace(stored, holder=holder)
        return claimed

    def _select(self, where: RecordFilter, by: Order = "started") -> list[JobRecord]:
        with self._lock:
            chosen = [r for r in self._records.values() if _matches(r, where)]
        if by == "finished":
            chosen.sort(key=lambda r: r.finished_at or 0.0, reverse=True)
        else:
            chosen.sort(key=lambda r: r.started_at, reverse=True)
        return chosen

    def newest(
        self, where: RecordFilter, limit: int, offset: int = 0, *, by: Order = "started"
    ) -> list[JobRecord]:
        return self._select(where, by)[offset : offset + limit]

    def count(self, where: RecordFilter) -> int:
        return len(self._select(where))

    def kill_requests(self, holder: Holder) -> list[str]:
        return [
            r.id
            for r in self._records.values()
            if r.kill_requested and not r.terminal and r.holder == holder
        ]

    def prune(self, now: float | None = None) -> int:
        cutoff = (time.time() if now is None else now) - self.retention_days * 86400.0
        with self._lock:
            finished = sorted(
                (r for r in self._records.values() if r.terminal),
                key=lambda r: r.finished_at or 0.0,
                reverse=True,
            )
            gone = [
                r.id
                for index, r in enumerate(finished)
                if index >= self.retention_count or (r.finished_at or 0.0) < cutoff
            ]
            for job_id in gone:
                del self._records[job_id]
            self._finished = len(finished) - len(gone)
        return len(gone)
