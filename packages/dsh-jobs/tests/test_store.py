"""The job store: records that outlive their registry and their process, the truth after a
crash, many writers at once, bounded reads over many records, retention, refusals that name the
path, kills through the store and the file's permissions.

Every test runs against the real :class:`SqliteJobStore` (and :class:`MemoryJobStore` where the
behaviour is the store contract's). Helper processes are plain Python (``sys.executable -c``):
dsh.jobs spawns nothing and its tests depend on no other dsh package, so they use the standard
library's subprocess module directly (hence the ``noqa: TID251``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import queue
import random
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import pytest

from dsh.jobs import (
    HOLDER_GONE_DETAIL,
    JobOutcome,
    JobRecord,
    JobRegistry,
    JobsConfig,
    JobStarted,
    JobStatus,
    JobStore,
    JobWork,
    LocalExecutor,
    MemoryJobStore,
    PortableWork,
    RecordFilter,
    SqliteJobStore,
    _sqlite_store,
    default_store_path,
    detach_requested,
    store_for,
)
from dsh.jobs._holder import Holder, this_process
from dsh.jobs._registry import OUTSIDE_KILL_REASON
from dsh.jobs._sqlite_store import SCHEMA_VERSION
from dsh.jobs._tools import JOB_LIST_FINISHED_LINES
from dsh.jobs.errors import ForeignJobError, JobStoreError, UnknownJobError
from dsh.jobs.tools import JobListTool

#: The "what to do" every refusal of a store ends with.
OTHER_PATH = 'set [jobs] store to another path, or "memory"'
#: A bound for any one wait on a helper process (its Python start-up included, on a busy CI).
CHILD_WAIT_S = 30.0
#: After pruning 10,001 finished records to 1,000 (short outputs) and VACUUM, the file measured
#: 244 KiB (SQLite 3, 4 KiB pages: rows of about 150 bytes and their indexes); it was 2,276 KiB
#: before. 1 MiB leaves room for other page sizes and SQLite versions and still fails if the
#: prune or the VACUUM did nothing.
PRUNED_FILE_BOUND = 1 << 20


@dataclass(frozen=True)
class Owner:
    session_id: str


A = Owner("session-a")
B = Owner("session-b")


async def complete(text: str, meta: Mapping[str, Any] | None = None) -> JobOutcome:
    return JobOutcome(JobStatus.COMPLETED, output=text, meta=meta)


async def hang() -> JobOutcome:
    await asyncio.Event().wait()
    return JobOutcome(JobStatus.COMPLETED, output="never")


async def nap_then_answer(text: str, seconds: float) -> JobOutcome:
    await asyncio.sleep(seconds)
    return JobOutcome(JobStatus.COMPLETED, output=text)


# Test modules are imported by path (importlib mode): a portable work's target is found through
# sys.modules under this module's own name.
HANG = f"{__name__}:hang"
COMPLETE = f"{__name__}:complete"
NAP_THEN_ANSWER = f"{__name__}:nap_then_answer"


def record(
    job_id: str,
    *,
    started_at: float,
    finished_at: float | None = None,
    owner: str | None = "session-a",
    holder: Holder | None = None,
    output: str = "",
) -> JobRecord:
    return JobRecord(
        id=job_id,
        kind="subagent",
        label=f"label of {job_id}",
        owner=owner,
        status=JobStatus.RUNNING if finished_at is None else JobStatus.COMPLETED,
        started_at=started_at,
        holder=this_process() if holder is None else holder,
        origin="test",
        output=output,
        finished_at=finished_at,
    )


def open_store(
    kind: str, path: Path, *, retention_days: float = 7.0, retention_count: int = 1000
) -> JobStore:
    if kind == "memory":
        return MemoryJobStore(retention_days=retention_days, retention_count=retention_count)
    return SqliteJobStore(path, retention_days=retention_days, retention_count=retention_count)


async def settled_out_of_memory(jobs: JobRegistry, live: set[str]) -> None:
    """Wait (bounded) until memory holds the ``live`` jobs only: every other one settled, its
    record durable, and the registry let it go."""
    for _ in range(500):
        assert jobs.store.flush(5)
        if set(jobs._jobs) == live:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"memory still holds {sorted(set(jobs._jobs) - live)}")


# ---- helper processes -------------------------------------------------------------------------


class Child:
    """A helper Python process. Its stdout lines arrive through a thread, so every read is
    bounded; its stderr goes to a file, read on failure."""

    def __init__(self, code: str, args: list[str], stderr_path: Path) -> None:
        self.stderr_path = stderr_path
        self._stderr: IO[bytes] = stderr_path.open("wb")
        self.proc = subprocess.Popen(  # noqa: TID251 - a test helper, see the module docstring
            [sys.executable, "-c", code, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self._lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def line(self, timeout_s: float = CHILD_WAIT_S) -> str:
        try:
            item = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(
                f"no line from pid {self.proc.pid} within {timeout_s} s; stderr:\n{self.stderr()}"
            ) from None
        if item is None:
            code = self.proc.wait(CHILD_WAIT_S)
            raise AssertionError(f"pid {self.proc.pid} exited {code}; stderr:\n{self.stderr()}")
        return item

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def wait(self, timeout_s: float = CHILD_WAIT_S) -> int:
        return self.proc.wait(timeout_s)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(CHILD_WAIT_S)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        self._stderr.close()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Child]]:
    """Start helper processes; any still running at the end is killed (by its own pid)."""
    children: list[Child] = []

    def start(code: str, *args: str) -> Child:
        child = Child(code, list(args), tmp_path / f"child-{len(children)}.stderr")
        children.append(child)
        return child

    yield start
    for child in children:
        child.close()


# A registry in a process of its own: three jobs that never end, three that complete; once the
# three are durable it prints their ids and waits to be killed.
CRASHING_HOLDER = """
import asyncio, functools, json, sys
from dataclasses import dataclass
from dsh.jobs import JobOutcome, JobRegistry, JobsConfig, JobStatus

@dataclass(frozen=True)
class Owner:
    session_id: str

async def finish(n):
    return JobOutcome(JobStatus.COMPLETED, output=f"output {n}", meta={"usage": {"tokens": n}})

async def main():
    owner = Owner(sys.argv[2])
    jobs = JobRegistry(JobsConfig(store=sys.argv[1]))
    never = asyncio.Event()
    done = []
    all_done = asyncio.Event()
    def on_done(event):
        done.append(event.snapshot.id)
        if len(done) == 3:
            all_done.set()
    jobs.on_job_done(on_done)
    running = [jobs.start("subagent", f"running {n}", owner, never.wait) for n in range(3)]
    complete = [
        jobs.start("subagent", f"finished {n}", owner, functools.partial(finish, n))
        for n in range(3)
    ]
    await asyncio.wait_for(all_done.wait(), 20)
    if not jobs.store.flush(20):
        sys.exit("the store did not flush")
    print(json.dumps({"running": running, "finished": complete}), flush=True)
    await never.wait()

asyncio.run(main())
"""

# One of many processes starting 50 jobs at once on one store. Any warning of dsh.jobs (the
# store's "a write failed") ends it at once with exit code 3 and the warning on stderr.
CONCURRENT_STARTER = """
import asyncio, functools, json, logging, os, sys
from dataclasses import dataclass
from dsh.jobs import JobOutcome, JobRegistry, JobsConfig, JobStatus

class FailLoudly(logging.Handler):
    def emit(self, record):
        sys.stderr.write(f"FAILED LOUDLY: {record.name}: {record.getMessage()}\\n")
        sys.stderr.flush()
        os._exit(3)

logging.getLogger("dsh.jobs").addHandler(FailLoudly(logging.WARNING))

@dataclass(frozen=True)
class Owner:
    session_id: str

async def work(tag, n):
    return JobOutcome(JobStatus.COMPLETED, output=f"{tag} output {n}")

async def main():
    path, tag, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    owner = Owner(tag)
    jobs = JobRegistry(JobsConfig(store=path, max_concurrent_jobs_per_owner=64))
    jobs.open_store()
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    ids = []
    for n in range(count):
        ids.append(jobs.start("subagent", f"{tag} {n}", owner, functools.partial(work, tag, n)))
        await asyncio.sleep(0.001)  # spread the starts: many small commits, interleaved
    for job_id in ids:
        snapshot = await jobs.wait(job_id, 30, owner)
        if snapshot.status != "completed":
            sys.exit(f"{job_id} settled {snapshot.status}")
    if not jobs.store.flush(30):
        sys.exit("the store did not flush")
    await jobs.aclose()
    print(json.dumps(ids), flush=True)

asyncio.run(main())
"""


# ---- a. records outlive the registry ----------------------------------------------------------


async def test_records_outlive_the_registry_that_wrote_them(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    config = JobsConfig(store=str(path))
    usage = {"usage": {"input_tokens": 7, "output_tokens": 3}}

    async def failing() -> JobOutcome:
        return JobOutcome(JobStatus.FAILED, detail="it broke", output="partial")

    async with JobRegistry(config) as first:
        answered = first.start("subagent", "answer", A, functools.partial(complete, "42", usage))
        broke = first.start("shell", "break", A, failing)
        killed = first.start("subagent", "kill me", A, hang)
        closed = first.start("subagent", "still running at close", A, hang)
        theirs = first.start("subagent", "another owner's", B, functools.partial(complete, "b"))
        unowned = first.start("subagent", "nobody's", None, functools.partial(complete, "u"))
        await first.stop(killed, A, "not needed", 5)
        # Memory keeps a job only until its settled record is durable; the live one stays.
        # (No wait here: a wait would mark the jobs reported.)
        await settled_out_of_memory(first, {closed})
        assert first.read(answered, A) == "42"  # a read of a job in the store only
    # aclose killed the live job and wrote everything.

    async with JobRegistry(config) as second:
        assert second.read(answered, A) == "42"
        snapshot = second.get(answered, A)
        assert (snapshot.status, snapshot.kind, snapshot.label) == (
            JobStatus.COMPLETED,
            "subagent",
            "answer",
        )
        assert snapshot.meta == usage
        assert snapshot.reported is True  # the first registry's read is in the record
        assert snapshot.finished_at is not None
        assert snapshot.finished_at >= snapshot.started_at
        failed = second.get(broke, A)
        assert failed.status_line == "[status: failed, it broke]"
        assert failed.reported is False
        assert second.read(broke, A) == "partial"
        assert second.get(killed, A).status_line == "[status: killed, not needed]"
        assert second.get(closed, A).status is JobStatus.KILLED
        assert [s.id for s in second.list(A)] == [answered, broke, killed, closed]
        assert second.read(theirs, B) == "b"
        with pytest.raises(ForeignJobError):
            second.read(theirs, A)
        # An unowned job is visible to the registry that started it, and to no other.
        with pytest.raises(UnknownJobError, match=f"^unknown job {unowned}$"):
            second.get(unowned, None)
        # Notices are the registry's own: another registry pulls none for these jobs.
        assert second.take_notices(A) == []
        listed = await JobListTool(second).call({}, A)
        assert listed.text.splitlines()[-1].endswith("— answer")
        assert len(listed.text.splitlines()) == 4

    # The read in the second registry reached the file too.
    store = SqliteJobStore(path)
    try:
        stored = store.get(broke)
        assert stored is not None
        assert stored.reported is True
        assert stored.work is None
        assert store.count(RecordFilter(owner="session-a")) == 4
        assert store.count(RecordFilter(live=True)) == 0
    finally:
        store.close()


async def test_a_notice_is_taken_once_when_its_flag_lands_during_the_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race behind a notice riding twice: a read of the store that predates the
    ``noticed`` write, and the write landing (leaving the registry's queue) before the read's
    records are overlaid with the queue."""
    async with JobRegistry(JobsConfig(store=str(tmp_path / "jobs.sqlite3"))) as jobs:
        job_id = jobs.start("subagent", "answer", A, functools.partial(complete, "42"))
        await settled_out_of_memory(jobs, set())
        store = jobs.store
        held: list[Callable[[], None]] = []
        real_update, real_newest = store.update, store.newest

        def update_later(job_id: str, changes: Mapping[str, Any], done: Any = None) -> None:
            held.append(lambda: real_update(job_id, changes, done))

        def newest_then_land(*args: Any, **kwargs: Any) -> list[JobRecord]:
            records = real_newest(*args, **kwargs)  # read before the held write lands
            while held:
                held.pop()()
            assert store.flush(5)
            return records

        monkeypatch.setattr(store, "update", update_later)
        assert len(jobs.take_notices(A)) == 1
        assert held  # the noticed flag is queued, not yet written
        monkeypatch.setattr(store, "newest", newest_then_land)
        assert jobs.take_notices(A) == []
        assert not held
        monkeypatch.setattr(store, "newest", real_newest)
        record = store.get(job_id)
        assert record is not None
        assert record.noticed


async def test_a_memory_store_shared_by_two_registries_keeps_the_records(tmp_path: Path) -> None:
    store = MemoryJobStore()
    async with JobRegistry(store=store) as first:
        job_id = first.start("subagent", "x", A, functools.partial(complete, "kept"))
        await first.wait(job_id, 5, A)
        assert first.store is store
    async with JobRegistry(store=store) as second:
        assert second.read(job_id, A) == "kept"
    assert not (tmp_path / "state").exists()  # a memory store writes no file


# ---- b. the truth after a crash ---------------------------------------------------------------


async def test_after_a_crash_finished_records_are_intact_and_running_ones_failed(
    tmp_path: Path, spawn: Callable[..., Child]
) -> None:
    path = tmp_path / "jobs.sqlite3"
    holder = spawn(CRASHING_HOLDER, str(path), A.session_id)
    ids = json.loads(holder.line())
    holder.proc.send_signal(signal.SIGKILL)
    assert holder.wait() == -signal.SIGKILL
    running: list[str] = ids["running"]
    complete: list[str] = ids["finished"]
    by_store, by_registry = running[:2], running[2]

    # The file still says "running": nobody was left to write otherwise.
    raw = SqliteJobStore(path)
    try:
        stale = [raw.get(job_id) for job_id in running]
        assert [(r.status, r.holder.pid) for r in stale if r is not None] == [
            (JobStatus.RUNNING, holder.proc.pid)
        ] * 3
        assert raw.count(RecordFilter(live=True)) == 3
        # The store's correction gives the truth and writes it back.
        corrected = raw.correct(r for r in stale if r is not None and r.id in by_store)
        assert [(r.id, r.status, r.detail) for r in corrected] == [
            (job_id, JobStatus.FAILED, HOLDER_GONE_DETAIL) for job_id in by_store
        ]
        assert raw.flush(5)
    finally:
        raw.close()

    fresh = SqliteJobStore(path)
    try:
        for job_id in by_store:
            written = fresh.get(job_id)
            assert written is not None
            assert (written.status, written.detail) == (JobStatus.FAILED, HOLDER_GONE_DETAIL)
            assert written.finished_at is not None
            assert written.reported is False  # a correction is not a read
        untouched = fresh.get(by_registry)
        assert untouched is not None
        assert untouched.status is JobStatus.RUNNING
    finally:
        fresh.close()

    async with JobRegistry(JobsConfig(store=str(path))) as jobs:
        for n, job_id in enumerate(complete):
            snapshot = jobs.get(job_id, A)
            assert snapshot.status is JobStatus.COMPLETED
            assert snapshot.label == f"finished {n}"
            assert snapshot.meta == {"usage": {"tokens": n}}
            assert jobs.read(job_id, A) == f"output {n}"
        for job_id in by_store:
            snapshot = jobs.get(job_id, A)
            assert snapshot.status_line == f"[status: failed, {HOLDER_GONE_DETAIL}]"
            assert jobs.read(job_id, A) == ""
        # The registry corrects what it reads: a wait on the last one ends at once.
        snapshot = await asyncio.wait_for(jobs.wait(by_registry, 30, A), 5)
        assert (snapshot.status, snapshot.detail) == (JobStatus.FAILED, HOLDER_GONE_DETAIL)
        assert jobs.kill(by_registry, A) == "already-finished"
        overview = jobs.overview(A, JOB_LIST_FINISHED_LINES)
        assert overview.live == []
        assert len(overview.finished) == 6
        listed = await JobListTool(jobs).call({}, A)
        assert f"{by_registry} [subagent] failed — running 2" in listed.text.splitlines()
        assert jobs.store.flush(5)

    after = SqliteJobStore(path)
    try:
        stored = after.get(by_registry)
        assert stored is not None
        assert (stored.status, stored.detail) == (JobStatus.FAILED, HOLDER_GONE_DETAIL)
        assert stored.reported is True  # the wait reported it
        assert after.count(RecordFilter(live=True)) == 0
    finally:
        after.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_reused_pid_is_not_the_holder(kind: str, tmp_path: Path) -> None:
    me = this_process()
    store = open_store(kind, tmp_path / "jobs.sqlite3")
    try:
        now = time.time()
        mine = record("subagent-000000000001", started_at=now)
        # Same pid, another start time: the process that held it is gone, the pid reused.
        reused = record(
            "subagent-000000000002", started_at=now, holder=Holder(me.pid, me.start + 1)
        )
        store.insert(mine)
        store.insert(reused)
        assert store.flush(5)
        out = {r.id: r for r in store.correct([mine, reused])}
        assert out[mine.id] == mine
        assert (out[reused.id].status, out[reused.id].detail) == (
            JobStatus.FAILED,
            HOLDER_GONE_DETAIL,
        )
        assert store.flush(5)
        written = store.get(reused.id)
        assert written is not None
        assert written.status is JobStatus.FAILED
        # A correction never overrides a settlement: the first one wins.
        late = replace(out[reused.id], status=JobStatus.COMPLETED, detail=None, output="late")
        store.settle(late)
        assert store.flush(5)
        kept = store.get(reused.id)
        assert kept is not None
        assert (kept.status, kept.output) == (JobStatus.FAILED, "")
    finally:
        store.close()


# ---- c. many processes at once ----------------------------------------------------------------


def test_eight_processes_starting_fifty_jobs_each_at_once_lose_nothing(
    tmp_path: Path, spawn: Callable[..., Child]
) -> None:
    path = tmp_path / "jobs.sqlite3"  # created by the first of them: the opens race too
    processes, per_process = 8, 50
    children = [
        spawn(CONCURRENT_STARTER, str(path), f"p{n}", str(per_process)) for n in range(processes)
    ]
    for child in children:
        assert child.line() == "ready"
    for child in children:  # all at once
        child.send("go\n")
    reported: list[str] = []
    for child in children:
        ids = json.loads(child.line())
        assert child.wait() == 0, child.stderr()
        assert "FAILED LOUDLY" not in child.stderr()
        assert "locked" not in child.stderr()
        assert len(ids) == per_process
        reported += ids
    assert len(set(reported)) == processes * per_process

    connection = sqlite3.connect(path)
    try:
        rows = connection.execute("SELECT id, owner, status, output, label FROM jobs").fetchall()
    finally:
        connection.close()
    assert len(rows) == processes * per_process
    assert {row[0] for row in rows} == set(reported)
    for _, owner, status, output, label in rows:
        tag, n = label.split()
        assert (owner, status, output) == (tag, "completed", f"{tag} output {n}")


# ---- d. many records: bounded job_list, prune and vacuum --------------------------------------


def fill(path: Path, count: int, owner: str, now: float) -> None:
    """``count`` finished records of ``owner``, one a second up to ``now``, in one transaction."""
    SqliteJobStore(path).close()  # the schema
    me = this_process()
    rows = [
        (
            f"subagent-{n:012x}",
            "subagent",
            f"task {n}",
            owner,
            "elsewhere",
            "completed",
            None,
            f"output {n}",
            now - count + n,
            now - count + n + 0.5,
            1,
            0,
            None,
            None,
            me.pid,
            me.start,
            0,
            None,
        )
        for n in range(count)
    ]
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("BEGIN")
        connection.executemany(
            "INSERT INTO jobs (id, kind, label, owner, origin, status, detail, output,"
            " started_at, finished_at, reported, noticed, location, meta, holder_pid,"
            " holder_start, kill_requested, work) VALUES"
            " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        connection.execute("COMMIT")
    finally:
        connection.close()


def store_bytes(path: Path) -> int:
    """The store's size on disk: the file and what its write-ahead log holds."""
    wal = Path(f"{path}-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


async def test_job_list_over_ten_thousand_records_then_prune_and_vacuum(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    count = 10_000
    fill(path, count, A.session_id, time.time())
    async with JobRegistry(JobsConfig(store=str(path), retention_count=20_000)) as jobs:
        gate = asyncio.Event()

        async def live() -> JobOutcome:
            await gate.wait()
            return JobOutcome(JobStatus.COMPLETED, output="live")

        running = jobs.start("subagent", "still going", A, live)
        listing = JobListTool(jobs)
        began = time.perf_counter()
        result = await listing.call({}, A)
        elapsed = time.perf_counter() - began
        print(f"\njob_list over {count:,} finished records: {elapsed * 1000:.1f} ms")
        lines = result.text.splitlines()
        assert len(lines) == 1 + JOB_LIST_FINISHED_LINES + 1
        assert lines[0] == f"{running} [subagent] running — still going"
        assert lines[1:-1] == [
            f"subagent-{n:012x} [subagent] completed — task {n}"
            for n in range(count - 1, count - 1 - JOB_LIST_FINISHED_LINES, -1)
        ]
        assert lines[-1] == f"and {count - JOB_LIST_FINISHED_LINES} more finished jobs"
        assert jobs.read(f"subagent-{5000:012x}", A) == "output 5000"

        gate.set()
        await jobs.wait(running, 5, A)
        store = jobs.store
        assert isinstance(store, SqliteJobStore)
        assert store.flush(5)
        before = store_bytes(path)
        store.retention_count = 1000
        assert store.prune() == count + 1 - 1000
        store.vacuum()
        after = store_bytes(path)
        print(
            f"store file: {before / 1024:.0f} KiB with {count + 1:,} records,"
            f" {after / 1024:.0f} KiB after prune to 1,000 and VACUUM"
        )
        assert after < PRUNED_FILE_BOUND
        assert after < before / 4
        assert store.count(RecordFilter()) == 1000
        # The newest finished stay: the live job that just settled among them.
        assert jobs.get(running, A).status is JobStatus.COMPLETED
        with pytest.raises(UnknownJobError):
            jobs.get(f"subagent-{count - 1000:012x}", A)
        assert jobs.read(f"subagent-{count - 999:012x}", A) == f"output {count - 999}"
        pruned = await listing.call({}, A)
        assert (
            pruned.text.splitlines()[-1]
            == f"and {1000 - JOB_LIST_FINISHED_LINES} more finished jobs"
        )


# ---- e. refusals that name the path -----------------------------------------------------------


def not_writable_directory(tmp_path: Path) -> Path:
    """A store path whose "directory" is a regular file: no one can create it, root included."""
    (tmp_path / "afile").write_bytes(b"a plain file, not a directory\n")
    return tmp_path / "afile" / "jobs.sqlite3"


def nested_under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "afile").write_bytes(b"a plain file, not a directory\n")
    return tmp_path / "afile" / "dsh" / "jobs.sqlite3"


def random_bytes(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.sqlite3"
    path.write_bytes(random.Random(7).randbytes(16384))
    return path


def other_programs_database(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.sqlite3"
    connection = sqlite3.connect(path)
    try:
        connection.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        connection.execute("INSERT INTO notes (body) VALUES ('do not touch')")
        connection.commit()
    finally:
        connection.close()
    return path


def newer_schema(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.sqlite3"
    store = SqliteJobStore(path)
    store.insert(record("subagent-0000000000aa", started_at=time.time(), finished_at=time.time()))
    store.close()
    connection = sqlite3.connect(path)
    try:
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    finally:
        connection.close()
    return path


def a_directory(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.sqlite3"
    path.mkdir()
    return path


REFUSALS: dict[str, tuple[Callable[[Path], Path], str, str]] = {
    "directory is a file": (
        not_writable_directory,
        "cannot create it (Not a directory)",
        OTHER_PATH,
    ),
    "directory to create under a file": (
        nested_under_a_file,
        "cannot create it (Not a directory)",
        OTHER_PATH,
    ),
    "not a database": (random_bytes, "the file is not a SQLite database", "move it away or"),
    "another program's database": (
        other_programs_database,
        "the file is another program's SQLite database",
        "move it away or",
    ),
    "newer schema": (
        newer_schema,
        f"written by a newer dsh (schema {SCHEMA_VERSION + 1}; this dsh reads up to"
        f" {SCHEMA_VERSION})",
        "upgrade dsh, or",
    ),
    # The text says "cannot write it (read-only)", which misleads for a directory: only what
    # every refusal shares is checked here.
    "a directory": (a_directory, "cannot", OTHER_PATH),
}


def snapshot_files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_store_that_cannot_be_used_is_refused_as_it_opens_and_left_as_it_was(
    case: str, tmp_path: Path
) -> None:
    make, what, todo = REFUSALS[case]
    root = tmp_path / "case"
    root.mkdir()
    path = make(root)
    before = snapshot_files(root)
    with pytest.raises(JobStoreError) as info:
        store_for(JobsConfig(store=str(path)))
    message = str(info.value)
    assert info.value.path == str(path)
    assert message.startswith(f"job store {path}: ")
    assert what in message
    assert todo in message
    assert message.endswith(OTHER_PATH)
    after = snapshot_files(root)
    # Nothing written: the files are byte for byte as they were (SQLite may leave an empty
    # write-ahead log and its index beside a file it could read).
    for name in set(after) - set(before):
        assert name.endswith(("-wal", "-shm")), name
        if name.endswith("-wal"):
            assert after[name] == b"", name
    assert {name: after[name] for name in before} == before


def test_a_refused_store_still_reads_in_sqlite_and_nothing_is_lost(tmp_path: Path) -> None:
    path = newer_schema(tmp_path)
    with pytest.raises(JobStoreError):
        SqliteJobStore(path)
    (tmp_path / "other").mkdir()
    other = other_programs_database(tmp_path / "other")
    with pytest.raises(JobStoreError):
        SqliteJobStore(other)
    connection = sqlite3.connect(path)
    try:
        assert connection.execute("SELECT id FROM jobs").fetchall() == [("subagent-0000000000aa",)]
        assert connection.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION + 1,)
    finally:
        connection.close()
    connection = sqlite3.connect(other)
    try:
        assert connection.execute("SELECT body FROM notes").fetchall() == [("do not touch",)]
        assert connection.execute("PRAGMA application_id").fetchone() == (0,)
    finally:
        connection.close()


def _store_waiting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_busy_s: float) -> Path:
    """Where a store goes whose open waits ``open_busy_s`` for another writer's lock."""
    monkeypatch.setattr(_sqlite_store, "OPEN_BUSY_S", open_busy_s)
    return tmp_path / "jobs.sqlite3"


def test_a_store_locked_by_a_stuck_writer_is_refused_after_the_open_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _store_waiting(tmp_path, monkeypatch, 1.0)
    store = SqliteJobStore(path)
    store.insert(record("subagent-0000000000bb", started_at=time.time(), output="kept"))
    store.close()
    before = path.read_bytes()
    stuck = sqlite3.connect(path, isolation_level=None)
    try:
        stuck.execute("BEGIN IMMEDIATE")
        began = time.monotonic()
        with pytest.raises(JobStoreError) as info:
            SqliteJobStore(path)
        waited = time.monotonic() - began
        assert waited >= 0.9  # it waited for the lock before it gave up
        message = str(info.value)
        assert message.startswith(f"job store {path}: ")
        assert "another process has held its write lock for over 1 s" in message
        assert "stop that process (a stuck dsh or an open sqlite3 shell)" in message
        assert message.endswith(OTHER_PATH)
        assert info.value.path == str(path)
    finally:
        stuck.execute("ROLLBACK")
        stuck.close()
    assert path.read_bytes() == before
    # Once the writer is gone the store opens, with its record.
    store = SqliteJobStore(path)
    try:
        kept = store.get("subagent-0000000000bb")
        assert kept is not None
        assert kept.output == "kept"
    finally:
        store.close()


def test_a_lock_held_briefly_only_delays_the_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _store_waiting(tmp_path, monkeypatch, 3.0)
    SqliteJobStore(path).close()
    busy = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    busy.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, lambda: busy.execute("COMMIT"))
    release.start()
    try:
        store = SqliteJobStore(path)
        store.close()
    finally:
        release.join(5)
        busy.close()


async def test_a_registry_on_a_store_it_cannot_use_starts_no_job(tmp_path: Path) -> None:
    path = random_bytes(tmp_path)
    ran: list[str] = []

    async def work() -> JobOutcome:
        ran.append("ran")
        return JobOutcome(JobStatus.COMPLETED)

    jobs = JobRegistry(JobsConfig(store=str(path)))
    with pytest.raises(JobStoreError, match="is not a SQLite database"):
        jobs.start("subagent", "x", A, work)
    with pytest.raises(JobStoreError):
        jobs.open_store()
    await asyncio.sleep(0)
    assert ran == []
    await jobs.aclose()


# ---- f. retention by age ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_records_finished_longer_ago_than_retention_days_are_pruned(
    kind: str, tmp_path: Path
) -> None:
    day = 86400.0
    now = time.time()
    store = open_store(kind, tmp_path / "jobs.sqlite3", retention_days=7.0)
    try:
        ages = {"ten": 10.0, "eight": 8.0, "six": 6.0, "one": 1.0}
        for name, age in ages.items():
            store.insert(
                record(f"old-{name}", started_at=now - age * day - 60, finished_at=now - age * day)
            )
        # A live record is never pruned, however old.
        store.insert(record("live-thirty", started_at=now - 30 * day))
        assert store.flush(5)
        assert store.prune(now) == 2
        left = {r.id for r in store.newest(RecordFilter(), 100)}
        assert left == {"old-six", "old-one", "live-thirty"}
        assert store.prune(now) == 0
        # Two days on, the six-day-old record is past retention too.
        assert store.prune(now + 2 * day) == 1
        assert {r.id for r in store.newest(RecordFilter(), 100)} == {"old-one", "live-thirty"}
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_only_the_newest_retention_count_finished_records_are_kept(
    kind: str, tmp_path: Path
) -> None:
    now = time.time()
    store = open_store(kind, tmp_path / "jobs.sqlite3", retention_count=3)
    try:
        for n in range(6):
            store.insert(record(f"done-{n}", started_at=now - 100 + n, finished_at=now - 50 + n))
        store.insert(record("live", started_at=now - 200))
        assert store.flush(5)
        assert store.prune(now) == 3
        assert {r.id for r in store.newest(RecordFilter(), 100)} == {
            "done-3",
            "done-4",
            "done-5",
            "live",
        }
    finally:
        store.close()


def test_a_sqlite_store_prunes_as_it_opens(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    now = time.time()
    keep_all = SqliteJobStore(path, retention_days=365.0)
    keep_all.insert(record("old", started_at=now - 9 * 86400, finished_at=now - 8 * 86400))
    keep_all.insert(record("new", started_at=now - 60, finished_at=now - 30))
    keep_all.close()
    store = SqliteJobStore(path, retention_days=7.0)
    try:
        assert store.flush(5)
        assert store.get("old") is None
        assert store.get("new") is not None
    finally:
        store.close()


# ---- g. a kill from another process, through the store ----------------------------------------


async def test_a_kill_written_to_the_store_stops_the_job_where_it_runs(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    async with JobRegistry(JobsConfig(store=str(path))) as jobs:
        stopped: list[str] = []

        async def work() -> JobOutcome:
            try:
                await asyncio.Event().wait()
            finally:
                stopped.append("stopped")
            return JobOutcome(JobStatus.COMPLETED)

        job_id = jobs.start("subagent", "held here", A, work)
        assert jobs.store.flush(5)
        # Another process (dsh jobs kill) has a store of its own on the file.
        outside = SqliteJobStore(path)
        try:
            began = time.monotonic()
            outside.update(job_id, {"kill_requested": True})
            assert outside.flush(5)
            # The holder's writer thread looks for kill requests twice a second.
            snapshot = await jobs.wait(job_id, 2.0, A)
            took = time.monotonic() - began
            assert snapshot.status_line == f"[status: killed, {OUTSIDE_KILL_REASON}]", took
            assert stopped == ["stopped"]
            assert jobs.store.flush(5)
            written = outside.get(job_id)
            assert written is not None
            assert (written.status, written.detail) == (JobStatus.KILLED, OUTSIDE_KILL_REASON)
        finally:
            outside.close()


async def test_another_registry_stops_a_job_held_elsewhere_and_sees_it_settle(
    tmp_path: Path,
) -> None:
    config = JobsConfig(store=str(tmp_path / "jobs.sqlite3"))
    async with JobRegistry(config) as holding, JobRegistry(config) as other:
        job_id = holding.start("subagent", "held there", A, hang)
        assert holding.store.flush(5)
        assert other.get(job_id, A).status is JobStatus.RUNNING
        with pytest.raises(ForeignJobError):
            other.kill(job_id, B)
        result, snapshot = await other.stop(job_id, A, None, 2.0)
        assert result == "requested"
        assert snapshot.status_line == f"[status: killed, {OUTSIDE_KILL_REASON}]"
        assert snapshot.reported is True
        assert holding.get(job_id, A).status is JobStatus.KILLED


# ---- h. the file's permissions ----------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_the_default_store_is_private_to_its_user(private_state_home: Path) -> None:
    path = default_store_path()
    assert path == private_state_home / "dsh" / "jobs.sqlite3"
    assert not path.parent.exists()
    async with JobRegistry() as jobs:
        job_id = jobs.start("subagent", "x", A, functools.partial(complete, "out"))
        await jobs.wait(job_id, 5, A)
        assert jobs.store.path == str(path)
        assert jobs.store.flush(5)
        assert mode(path) == 0o600
        assert mode(path.parent) == 0o700
        for extra in (Path(f"{path}-wal"), Path(f"{path}-shm")):
            if extra.exists():
                assert mode(extra) & 0o077 == 0, extra


def test_a_store_path_in_a_new_directory_is_created_private(tmp_path: Path) -> None:
    path = tmp_path / "new" / "jobs.sqlite3"
    SqliteJobStore(path).close()
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700
    # An existing file keeps the mode its owner gave it.
    path.chmod(0o640)
    SqliteJobStore(path).close()
    assert mode(path) == 0o640


def test_store_for_names_the_memory_the_default_and_a_path(
    tmp_path: Path, private_state_home: Path
) -> None:
    memory = store_for(JobsConfig(store="memory", retention_days=2, retention_count=5))
    assert isinstance(memory, MemoryJobStore)
    assert (memory.path, memory.retention_days, memory.retention_count) == (None, 2, 5)
    default = store_for(JobsConfig())
    try:
        assert isinstance(default, SqliteJobStore)
        assert default.path == str(private_state_home / "dsh" / "jobs.sqlite3")
    finally:
        default.close()
    named = store_for(JobsConfig(store=str(tmp_path / "x.sqlite3")))
    try:
        assert named.path == str(tmp_path / "x.sqlite3")
    finally:
        named.close()
    assert default_store_path({"XDG_STATE_HOME": "relative"}) == (
        Path.home() / ".local" / "state" / "dsh" / "jobs.sqlite3"
    )


# ---- detached jobs: the record stays live for the process that runs the work ------------------


class DetachingExecutor(LocalExecutor):
    """Stands in for an executor whose work runs in a process of its own (dsh mcp's)."""

    name = "detaching"
    detaches = True
    runs_from_store = True

    def __init__(self) -> None:
        self.cancelled: list[bool] = []

    async def execute(self, work: JobWork, started: JobStarted) -> JobOutcome:
        try:
            return await super().execute(work, started)
        except asyncio.CancelledError:
            self.cancelled.append(detach_requested())  # let go (True) or killed (False)
            raise


def test_portable_work_travels_as_one_json_text() -> None:
    work = PortableWork(HANG, {"text": "x", "n": [1, 2.5, None, True], "nested": {"k": "v"}})
    text = work.to_json()
    assert json.loads(text) == {"target": HANG, "arguments": dict(work.arguments)}
    assert PortableWork.from_json(text) == work


async def test_detach_owner_leaves_the_record_live_with_its_work_and_kill_is_the_default(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.sqlite3"
    executor = DetachingExecutor()
    work = PortableWork(HANG, {})
    async with JobRegistry(JobsConfig(store=str(path)), executor=executor) as jobs:
        detached = jobs.start("subagent", "goes on elsewhere", A, work)
        done = jobs.start("subagent", "done", A, PortableWork(COMPLETE, {"text": "out"}))
        other = jobs.start("subagent", "another owner's", B, work)
        assert (await jobs.wait(done, 5, A)).status is JobStatus.COMPLETED
        assert jobs.store.flush(5)
        live = jobs.store.get(detached)
        assert live is not None
        assert live.work is not None
        assert PortableWork.from_json(live.work) == work
        settled = jobs.store.get(done)
        assert settled is not None
        assert settled.work is None  # a settled record drops its work
        await jobs.detach_owner(A)
        assert executor.cancelled == [True]
        assert detached not in jobs._jobs
        # Not settled here: the record stays live, for the process that runs it to settle.
        assert jobs.get(detached, A).status is JobStatus.RUNNING
        assert jobs.get(other, B).status is JobStatus.RUNNING
        assert jobs.store.flush(5)
        record_now = jobs.store.get(detached)
        assert record_now is not None
        assert (record_now.status, record_now.finished_at) == (JobStatus.RUNNING, None)
        assert record_now.work == work.to_json()
    assert executor.cancelled == [True, False]  # aclose killed B's job
    async with JobRegistry(JobsConfig(store=str(path))) as plain:
        gone = plain.start("subagent", "no detaching here", A, hang)
        await plain.detach_owner(A)  # the local executor cannot detach: it kills
        assert plain.get(gone, A).status is JobStatus.KILLED
        assert plain.get(other, B).status is JobStatus.KILLED


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_claim_moves_a_live_record_to_a_new_holder_only(kind: str, tmp_path: Path) -> None:
    store = open_store(kind, tmp_path / "jobs.sqlite3")
    try:
        now = time.time()
        store.insert(record("subagent-0000000000c1", started_at=now))
        store.insert(record("subagent-0000000000c2", started_at=now, finished_at=now))
        worker = Holder(this_process().pid, this_process().start + 7)
        claimed = store.claim("subagent-0000000000c1", worker)
        assert claimed is not None
        assert claimed.holder == worker
        stored = store.get("subagent-0000000000c1")
        assert stored is not None
        assert stored.holder == worker
        assert store.claim("subagent-0000000000c2", worker) is None  # already settled
        assert store.claim("subagent-0000000000c3", worker) is None  # no such record
        settled = store.get("subagent-0000000000c2")
        assert settled is not None
        assert settled.holder == this_process()
    finally:
        store.close()


async def test_a_registry_adopts_a_record_another_registry_started(tmp_path: Path) -> None:
    config = JobsConfig(store=str(tmp_path / "jobs.sqlite3"))
    executor = DetachingExecutor()
    async with JobRegistry(config, executor=executor) as starter:
        work = PortableWork(NAP_THEN_ANSWER, {"text": "x", "seconds": 0.05})
        job_id = starter.start("subagent", "run elsewhere", A, work)
        await starter.detach_owner(A)
    async with JobRegistry(config) as worker:
        claimed = worker.store.claim(job_id, this_process())
        assert claimed is not None
        assert claimed.work is not None
        assert worker.adopt(claimed, PortableWork.from_json(claimed.work)) == job_id
        snapshot = await asyncio.wait_for(worker.join(job_id), 5)
        assert snapshot.status is JobStatus.COMPLETED
        assert snapshot.reported is False  # join is the host's: a notice is still due
        assert worker.read(job_id, A) == "x"
