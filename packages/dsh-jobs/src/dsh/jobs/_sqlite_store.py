"""The default job store: one SQLite file per OS user, in WAL mode, written by one thread.

Every write goes through a queue to one writer thread, which commits what has gathered in one
transaction (so a burst of settlements is one commit) and retries while another process holds
the write lock. Reads use a connection per reading thread; WAL lets them run beside any writer.
While this process holds live jobs, the writer thread also looks for kill requests that
another process (``dsh jobs kill``) wrote, twice a second.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from dsh.jobs._holder import Holder
from dsh.jobs._store import Done, JobRecord, JobStore, Order, RecordFilter
from dsh.jobs._types import JobStatus
from dsh.jobs.errors import JobStoreError

__all__ = ["SCHEMA_VERSION", "SqliteJobStore"]

logger = logging.getLogger("dsh.jobs.store")

#: The schema this dsh writes (``PRAGMA user_version``); a newer file is refused.
SCHEMA_VERSION = 1
#: ``PRAGMA application_id``: "dsh1", so another program's database is never taken for ours.
APPLICATION_ID = 0x64736831
#: How long opening waits for another process's write lock before it says the store is locked.
OPEN_BUSY_S = 3.0
#: How long one write waits for the lock; a write is retried until WRITE_GIVE_UP_S in all.
WRITE_BUSY_S = 5.0
WRITE_GIVE_UP_S = 60.0
KILL_POLL_S = 0.5
CACHE_KIB = 256
#: Prune on open and after this many settlements.
PRUNE_EVERY = 100

_COLUMNS = (
    "id, kind, label, owner, origin, status, detail, output, started_at, finished_at, reported,"
    " noticed, location, meta, holder_pid, holder_start, kill_requested, work"
)
_SCHEMA = f"""
CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    label TEXT NOT NULL,
    owner TEXT,
    origin TEXT NOT NULL,
    status TEXT NOT NULL,
    detail TEXT,
    output TEXT NOT NULL DEFAULT '',
    started_at REAL NOT NULL,
    finished_at REAL,
    reported INTEGER NOT NULL DEFAULT 0,
    noticed INTEGER NOT NULL DEFAULT 0,
    location TEXT,
    meta TEXT,
    holder_pid INTEGER NOT NULL,
    holder_start INTEGER NOT NULL,
    kill_requested INTEGER NOT NULL DEFAULT 0,
    work TEXT
);
CREATE INDEX jobs_by_owner ON jobs (owner, started_at);
CREATE INDEX jobs_by_owner_finished ON jobs (owner, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_by_start ON jobs (started_at);
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_live ON jobs (holder_pid) WHERE finished_at IS NULL;
CREATE INDEX jobs_notice_due ON jobs (owner)
    WHERE finished_at IS NOT NULL AND reported = 0 AND noticed = 0;
PRAGMA user_version = {SCHEMA_VERSION};
PRAGMA application_id = {APPLICATION_ID};
"""
_UPDATABLE = {
    "reported": "reported",
    "noticed": "noticed",
    "kill_requested": "kill_requested",
    "where": "location",
    "status": "status",
    "detail": "detail",
}

_Op = Callable[[sqlite3.Connection], object]


def _record(row: tuple[Any, ...]) -> JobRecord:
    (
        job_id, kind, label, owner, origin, status, detail, output, started_at, finished_at,
        reported, noticed, location, meta, holder_pid, holder_start, kill_requested, work,
    ) = row  # fmt: skip
    return JobRecord(
        id=job_id,
        kind=kind,
        label=label,
        owner=owner,
        origin=origin,
        status=JobStatus(status),
        detail=detail,
        output=output,
        started_at=started_at,
        finished_at=finished_at,
        reported=bool(reported),
        noticed=bool(noticed),
        where=location,
        meta=json.loads(meta) if meta else None,
        holder=Holder(holder_pid, holder_start),
        kill_requested=bool(kill_requested),
        work=work,
    )


def _where(where: RecordFilter, *extra: tuple[str, Any]) -> tuple[str, list[Any]]:
    """``where`` (and ``extra`` clauses with one value each) as SQL and its values."""
    clauses = [clause for clause, _ in extra]
    values: list[Any] = [value for _, value in extra]
    if where.owner is not None:
        if where.origin:
            clauses.append("(owner = ? OR (owner IS NULL AND origin = ?))")
            values += [where.owner, where.origin]
        else:
            clauses.append("owner = ?")
            values.append(where.owner)
    if where.statuses is not None:
        clauses.append(f"status IN ({', '.join('?' * len(where.statuses))})")
        values += list(where.statuses)
    if where.since is not None:
        clauses.append("started_at >= ?")
        values.append(where.since)
    if where.live is not None:
        clauses.append("finished_at IS NULL" if where.live else "finished_at IS NOT NULL")
    if where.unnoticed:
        clauses.append("reported = 0 AND noticed = 0")
    if where.exclude:
        clauses.append(f"id NOT IN ({', '.join('?' * len(where.exclude))})")
        values += list(where.exclude)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", values


def _order_key(record: JobRecord, by: Order) -> float:
    if by == "finished":
        return record.finished_at or 0.0
    return record.started_at


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return str(exc) or type(exc).__name__


class SqliteJobStore(JobStore):
    """Records in the SQLite file ``path`` (created 0600, its directory 0700 when dsh makes it).

    Opening checks everything before a job can start: the directory can be written, the file
    is a dsh job store of a schema this dsh reads, and no other process holds the write lock
    for more than a few seconds. Each problem raises :class:`~dsh.jobs.errors.JobStoreError`
    naming the path and what to do.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        retention_days: float = 7.0,
        retention_count: int = 1000,
    ) -> None:
        super().__init__(retention_days=retention_days, retention_count=retention_count)
        self.file = os.fspath(path)
        self.path = self.file
        self._queue: queue.SimpleQueue[tuple[_Op, Done | None] | None] = queue.SimpleQueue()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._writer: threading.Thread | None = None
        self._closed = False
        self._settled = 0
        self._pending = 0
        self._idle = threading.Condition()
        #: Set by the registry: called (on the writer thread) with ids another process asked
        #: to kill among the jobs ``kill_holder`` holds, while ``holding() > 0``.
        self.kill_listener: Callable[[list[str]], None] | None = None
        self.kill_holder: Holder | None = None
        self.holding: Callable[[], int] = lambda: 0
        self._open()

    # -- opening ----------------------------------------------------------------------------

    def _fail(self, what: str, todo: str, exc: BaseException | None = None) -> JobStoreError:
        error = JobStoreError(f"job store {self.file}: {what}; {todo}", path=self.file)
        if exc is not None:
            error.__cause__ = exc
        return error

    def _open(self) -> None:
        other = 'set [jobs] store to another path, or "memory"'
        path = Path(self.file)
        if path.is_dir():
            raise self._fail("it is a directory, not a file", other)
        try:
            # Every directory dsh makes on the way is private (XDG asks 0700 of the state dir).
            for missing in reversed([p for p in path.parents if not p.exists()]):
                missing.mkdir(mode=0o700)
            if not path.exists():
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        except OSError as exc:
            raise self._fail(f"cannot create it ({_reason(exc)})", other, exc) from exc
        if not os.access(path, os.R_OK | os.W_OK) or not os.access(path.parent, os.W_OK):
            raise self._fail("cannot write it or its directory (permission denied)", other)
        try:
            connection = self._connect(OPEN_BUSY_S)
        except sqlite3.Error as exc:
            raise self._classified(exc) from exc
        try:
            self._check_schema(connection)
        except sqlite3.Error as exc:
            connection.close()
            raise self._classified(exc) from exc
        except JobStoreError:
            connection.close()
            raise
        connection.execute(f"PRAGMA busy_timeout = {int(WRITE_BUSY_S * 1000)}")
        self._writer = threading.Thread(
            target=self._write_loop, args=(connection,), name="dsh.jobs store writer", daemon=True
        )
        self._writer.start()
        self._submit(lambda c: self._prune_in(c, time.time()), None)

    def _classified(self, exc: sqlite3.Error) -> JobStoreError:
        text = str(exc).lower()
        if "not a database" in text or "malformed" in text:
            return self._fail(
                "the file is not a SQLite database", "move it away or " + _other_path(), exc
            )
        if "locked" in text or "busy" in text:
            return self._fail(
                f"another process has held its write lock for over {OPEN_BUSY_S:g} s",
                "stop that process (a stuck dsh or an open sqlite3 shell) or " + _other_path(),
                exc,
            )
        if "readonly" in text or "read-only" in text or "unable to open" in text:
            return self._fail("cannot write it (read-only)", _other_path(), exc)
        return self._fail(f"cannot use it ({type(exc).__name__})", _other_path(), exc)

    def _connect(self, busy_s: float) -> sqlite3.Connection:
        connection = sqlite3.connect(
            self.file, timeout=busy_s, isolation_level=None, check_same_thread=False
        )
        connection.execute(f"PRAGMA busy_timeout = {int(busy_s * 1000)}")
        # A bounded page cache per connection: a store at its retention is well under 1 MB,
        # so the cache stays small and a long-lived server's memory does not follow the file.
        connection.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        return connection

    def _check_schema(self, connection: sqlite3.Connection) -> None:
        # BEGIN IMMEDIATE takes the write lock: it proves the file is writable and not held by
        # a stuck writer before any job starts, and makes creating the schema race-free.
        connection.execute("BEGIN IMMEDIATE")
        try:
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            application = connection.execute("PRAGMA application_id").fetchone()[0]
            tables = connection.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if version > SCHEMA_VERSION and application == APPLICATION_ID:
                raise self._fail(
                    f"written by a newer dsh (schema {version}; this dsh reads up to"
                    f" {SCHEMA_VERSION})",
                    "upgrade dsh, or " + _other_path(),
                )
            if tables and application != APPLICATION_ID:
                raise self._fail(
                    "the file is another program's SQLite database",
                    "move it away or " + _other_path(),
                )
            if not tables:
                connection.execute("PRAGMA auto_vacuum = INCREMENTAL")
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        connection.execute(statement)
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise self._fail("cannot switch it to WAL mode", _other_path())
        connection.execute("PRAGMA synchronous = NORMAL")

    # -- the writer thread ------------------------------------------------------------------

    def _submit(self, op: _Op, done: Done | None) -> None:
        if self._closed:
            logger.debug("job store %s: a write after close was dropped", self.path)
            return
        with self._idle:
            self._pending += 1
        self._queue.put((op, done))

    def _write_loop(self, connection: sqlite3.Connection) -> None:
        last_poll = 0.0
        try:
            while True:
                # Woken at least twice a second, so a kill listener set at any time (a worker
                # adopts its job after the store opened) is served; a poll with no live job
                # here reads nothing.
                try:
                    item = self._queue.get(timeout=KILL_POLL_S)
                except queue.Empty:
                    last_poll = self._poll_kills(connection)
                    continue
                batch = [item]
                while True:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                stop = None in batch
                work = [entry for entry in batch if entry is not None]
                if work:
                    self._commit(connection, work)
                if time.monotonic() - last_poll >= KILL_POLL_S:
                    last_poll = self._poll_kills(connection)
                if stop:
                    return
        finally:
            connection.close()

    def _commit(self, connection: sqlite3.Connection, batch: list[tuple[_Op, Done | None]]) -> None:
        give_up = time.monotonic() + WRITE_GIVE_UP_S
        durable = False
        while True:
            try:
                connection.execute("BEGIN IMMEDIATE")
                for op, _ in batch:
                    op(connection)
                connection.execute("COMMIT")
                durable = True
                break
            except sqlite3.OperationalError as exc:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                if "locked" in str(exc).lower() and time.monotonic() < give_up:
                    continue  # busy_timeout already waited; another holder is still writing
                logger.warning("job store %s: a write failed; records may be stale", self.path)
                logger.debug("job store write failure", exc_info=exc)
                break
            except sqlite3.Error as exc:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                logger.warning("job store %s: a write failed; records may be stale", self.path)
                logger.debug("job store write failure", exc_info=exc)
                break
        # A write that failed is not durable: its callbacks do not run (the registry keeps the
        # job in memory, so this process still answers for it).
        for _, done in batch if durable else ():
            if done is not None:
                try:
                    done()
                except Exception:
                    logger.debug("a job store write callback raised", exc_info=True)
        with self._idle:
            self._pending -= len(batch)
            self._idle.notify_all()

    def _poll_kills(self, connection: sqlite3.Connection) -> float:
        holder, listener = self.kill_holder, self.kill_listener
        if holder is not None and listener is not None and self.holding() > 0:
            try:
                ids = self._kill_ids(connection, holder)
            except sqlite3.Error:
                logger.debug("job store: reading kill requests failed", exc_info=True)
                ids = []
            if ids:
                listener(ids)
        return time.monotonic()

    @staticmethod
    def _kill_ids(connection: sqlite3.Connection, holder: Holder) -> list[str]:
        rows = connection.execute(
            "SELECT id FROM jobs WHERE finished_at IS NULL AND holder_pid = ? AND holder_start = ?"
            " AND kill_requested = 1",
            (holder.pid, holder.start),
        ).fetchall()
        return [row[0] for row in rows]

    # -- writes -----------------------------------------------------------------------------

    def insert(self, record: JobRecord, done: Done | None = None) -> None:
        values = (
            record.id, record.kind, record.label, record.owner, record.origin, str(record.status),
            record.detail, record.output, record.started_at, record.finished_at,
            int(record.reported), int(record.noticed), record.where,
            json.dumps(dict(record.meta)) if record.meta is not None else None,
            record.holder.pid, record.holder.start, int(record.kill_requested), record.work,
        )  # fmt: skip
        sql = f"INSERT INTO jobs ({_COLUMNS}) VALUES ({', '.join('?' * 18)})"
        self._submit(lambda c: c.execute(sql, values), done)

    def settle(self, record: JobRecord, done: Done | None = None) -> None:
        meta = json.dumps(dict(record.meta)) if record.meta is not None else None
        values = (
            str(record.status), record.detail, record.output, record.finished_at,
            int(record.reported), int(record.noticed), record.where, meta, record.id,
        )  # fmt: skip
        sql = (
            "UPDATE jobs SET status = ?, detail = ?, output = ?, finished_at = ?, reported = ?,"
            " noticed = ?, location = ?, meta = coalesce(?, meta), work = NULL"
            " WHERE id = ? AND finished_at IS NULL"
        )

        def op(connection: sqlite3.Connection) -> None:
            connection.execute(sql, values)
            self._settled += 1
            if self._settled % PRUNE_EVERY == 0:
                self._prune_in(connection, time.time())

        self._submit(op, done)

    def update(self, job_id: str, changes: Mapping[str, Any], done: Done | None = None) -> None:
        sets: list[str] = []
        values: list[Any] = []
        for name, value in changes.items():
            if name == "holder":
                sets += ["holder_pid = ?", "holder_start = ?"]
                values += [value.pid, value.start]
                continue
            sets.append(f"{_UPDATABLE[name]} = ?")
            values.append(int(value) if isinstance(value, bool) else value)
        sql = f"UPDATE jobs SET {', '.join(sets)} WHERE id = ?"
        self._submit(lambda c: c.execute(sql, (*values, job_id)), done)

    def claim(self, job_id: str, holder: Holder) -> JobRecord | None:
        claimed: list[bool] = []

        def op(connection: sqlite3.Connection) -> None:
            cursor = connection.execute(
                "UPDATE jobs SET holder_pid = ?, holder_start = ?"
                " WHERE id = ? AND finished_at IS NULL",
                (holder.pid, holder.start, job_id),
            )
            claimed.append(cursor.rowcount == 1)

        self._submit(op, None)
        self.flush()
        return self.get(job_id) if claimed and claimed[0] else None

    def flush(self, timeout_s: float | None = None) -> bool:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._idle:
            while self._pending > 0:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._idle.wait(left)
        return True

    # -- reads ------------------------------------------------------------------------------

    def _reader(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._connect(WRITE_BUSY_S)
            self._local.connection = connection
            with self._readers_lock:
                self._readers.append(connection)
        return connection

    def _read(self, sql: str, values: Sequence[Any]) -> list[tuple[Any, ...]]:
        if not self._closed:
            return self._reader().execute(sql, values).fetchall()
        # After close (a registry read once it has closed): a connection for this read alone.
        connection = self._connect(WRITE_BUSY_S)
        try:
            return connection.execute(sql, values).fetchall()
        finally:
            connection.close()

    def get(self, job_id: str) -> JobRecord | None:
        rows = self._read(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
        return _record(rows[0]) if rows else None

    def newest(
        self, where: RecordFilter, limit: int, offset: int = 0, *, by: Order = "started"
    ) -> list[JobRecord]:
        column = "finished_at" if by == "finished" else "started_at"
        if where.owner is not None and where.origin:
            # An owner's records and this registry's unowned ones: two index-ordered pages,
            # merged (one query with an OR would sort every matching row first).
            unowned = replace(where, owner=None, origin=None)
            parts = [
                _where(replace(where, origin=None)),
                _where(unowned, ("owner IS NULL AND origin = ?", where.origin)),
            ]
            rows = []
            for clause, values in parts:
                rows += self._read(
                    f"SELECT {_COLUMNS} FROM jobs{clause} ORDER BY {column} DESC LIMIT ?",
                    (*values, offset + limit),
                )
            records = sorted(map(_record, rows), key=lambda r: _order_key(r, by), reverse=True)
            return records[offset : offset + limit]
        clause, values = _where(where)
        rows = self._read(
            f"SELECT {_COLUMNS} FROM jobs{clause} ORDER BY {column} DESC LIMIT ? OFFSET ?",
            (*values, limit, offset),
        )
        return [_record(row) for row in rows]

    def count(self, where: RecordFilter) -> int:
        clause, values = _where(where)
        return int(self._read(f"SELECT count(*) FROM jobs{clause}", values)[0][0])

    def kill_requests(self, holder: Holder) -> list[str]:
        return self._kill_ids(self._reader(), holder)

    # -- upkeep -----------------------------------------------------------------------------

    def _prune_in(self, connection: sqlite3.Connection, now: float) -> int:
        cutoff = now - self.retention_days * 86400.0
        gone = connection.execute(
            "DELETE FROM jobs WHERE finished_at IS NOT NULL AND (finished_at < ? OR id IN"
            " (SELECT id FROM jobs WHERE finished_at IS NOT NULL"
            "  ORDER BY finished_at DESC LIMIT -1 OFFSET ?))",
            (cutoff, self.retention_count),
        ).rowcount
        if gone:
            connection.execute("PRAGMA incremental_vacuum")
        return int(gone)

    def prune(self, now: float | None = None) -> int:
        result: list[int] = []
        moment = time.time() if now is None else now
        self._submit(lambda c: result.append(self._prune_in(c, moment)), None)
        self.flush()
        return result[0] if result else 0

    def vacuum(self) -> None:
        """Give the file's free pages back to the filesystem (``dsh jobs prune`` does this)."""
        self.flush()
        connection = self._connect(WRITE_BUSY_S)
        try:
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            connection.execute("VACUUM")
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            connection.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        if self._writer is not None and self._writer is not threading.current_thread():
            self._writer.join()
        with self._readers_lock:
            for connection in self._readers:
                with contextlib.suppress(sqlite3.Error):
                    connection.close()
            self._readers.clear()


def _other_path() -> str:
    return 'set [jobs] store to another path, or "memory"'
