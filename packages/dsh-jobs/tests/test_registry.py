"""JobRegistry: ids, admission, ownership, settlement, waits, listeners and closing."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from dsh.jobs import (
    JobDone,
    JobOutcome,
    JobRegistry,
    JobsConfig,
    JobSnapshot,
    JobStatus,
    JobWork,
    RecordFilter,
    attach_job_meta,
    current_job_id,
    job_admitted,
    job_queued,
)
from dsh.jobs.errors import (
    ForeignJobError,
    JobArgumentError,
    JobLimitError,
    JobRegistryClosedError,
    UnknownJobError,
)

LIMIT_MESSAGE = (
    "background job limit reached for this owner (limit: 10); use job_kill to stop an unneeded "
    "job, wait for it to finish, then retry"
)


@dataclass(frozen=True)
class Owner:
    session_id: str


A = Owner("session-a")
B = Owner("session-b")


def answer(text: str) -> JobOutcome:
    return JobOutcome(JobStatus.COMPLETED, output=text)


def records(jobs: JobRegistry) -> int:
    """How many records the registry's store holds once every queued write is durable."""
    store = jobs.store
    assert store.flush(5)
    return store.count(RecordFilter())


def blocked(gate: asyncio.Event, started: list[str] | None = None, name: str = "") -> JobWork:
    async def work() -> JobOutcome:
        if started is not None:
            started.append(name)
        await gate.wait()
        return answer(name)

    return work


ID_FORMAT = re.compile(r"(?P<kind>[a-z]+)-[0-9a-f]{12}")


async def test_ids_are_the_kind_and_twelve_random_hex_digits_and_never_repeat() -> None:
    kinds = ["subagent", "subagent", "shell", "subagent", "shell"]
    owners = [A, A, A, B, None]
    seen: set[str] = set()
    async with JobRegistry() as jobs:
        gate = asyncio.Event()
        ids = [
            jobs.start(kind, f"job {n}", owner, blocked(gate))
            for n, (kind, owner) in enumerate(zip(kinds, owners, strict=True))
        ]
        for kind, job_id in zip(kinds, ids, strict=True):
            match = ID_FORMAT.fullmatch(job_id)
            assert match is not None, job_id
            assert match["kind"] == kind
        seen.update(ids)
        gate.set()
        for job_id, owner in zip(ids, owners, strict=True):
            await jobs.wait(job_id, 5, owner)
        # Many more, settling as they go: no id is ever handed out twice, and no id follows
        # from the one before (a sequence would let one owner guess another's ids).
        done = asyncio.Event()
        done.set()
        for n in range(300):
            job_id = jobs.start("subagent", f"more {n}", A, blocked(done))
            assert ID_FORMAT.fullmatch(job_id) is not None
            assert job_id not in seen
            seen.add(job_id)
            await jobs.wait(job_id, 5, A)
    assert len(seen) == 305
    # Another registry (another process, another session) draws from the same space.
    async with JobRegistry() as other:
        again = other.start("subagent", "elsewhere", A, blocked(done))
        assert again not in seen


async def test_empty_kind_and_label_are_rejected_in_order_without_an_id() -> None:
    async with JobRegistry() as jobs:
        gate = asyncio.Event()
        gate.set()
        with pytest.raises(JobArgumentError, match="kind"):
            jobs.start("", "", A, blocked(gate))
        with pytest.raises(JobArgumentError, match="label"):
            jobs.start("subagent", "  ", A, blocked(gate))
        assert records(jobs) == 0  # neither rejection wrote a record
        job_id = jobs.start("subagent", "ok", A, blocked(gate))
        assert ID_FORMAT.fullmatch(job_id) is not None
        assert records(jobs) == 1
        assert jobs.store.get(job_id) is not None


async def test_eleventh_live_job_is_rejected_before_work_and_uses_no_id() -> None:
    async with JobRegistry() as jobs:
        gates = [asyncio.Event() for _ in range(10)]
        started: list[str] = []
        ids = [
            jobs.start("subagent", f"task {i}", A, blocked(gate, started, f"w{i}"))
            for i, gate in enumerate(gates)
        ]
        await asyncio.sleep(0)
        assert len(started) == 10
        assert records(jobs) == 10
        with pytest.raises(JobLimitError) as info:
            jobs.start("subagent", "too many", A, blocked(asyncio.Event(), started, "extra"))
        assert str(info.value) == LIMIT_MESSAGE
        await asyncio.sleep(0)
        assert "extra" not in started
        # The rejected start left no record (no id was allocated for it).
        assert records(jobs) == 10
        assert [s.label for s in jobs.list(A)] == [f"task {i}" for i in range(10)]
        # Another owner is admitted.
        other = jobs.start("subagent", "other owner", B, blocked(gates[0]))
        assert other not in ids
        assert records(jobs) == 11
        # A stopping job still counts against the limit.
        assert jobs.kill(ids[0], A) == "requested"
        assert jobs.get(ids[0], A).status is JobStatus.STOPPING
        with pytest.raises(JobLimitError):
            jobs.start("subagent", "still too many", A, blocked(asyncio.Event()))
        assert records(jobs) == 11
        await jobs.wait(ids[0], 5, A)
        fits = jobs.start("subagent", "now fits", A, blocked(gates[1]))
        assert fits not in [*ids, other]
        assert records(jobs) == 12
        for gate in gates:
            gate.set()


async def test_admission_limit_is_configurable() -> None:
    async with JobRegistry(JobsConfig(max_concurrent_jobs_per_owner=1)) as jobs:
        gate = asyncio.Event()
        jobs.start("subagent", "one", A, blocked(gate))
        with pytest.raises(JobLimitError, match=r"\(limit: 1\)"):
            jobs.start("subagent", "two", A, blocked(gate))
        gate.set()


async def test_another_session_is_fenced_and_unknown_ids_are_named() -> None:
    async with JobRegistry() as jobs:
        gate = asyncio.Event()
        job_id = jobs.start("subagent", "mine", A, blocked(gate))
        # Another owner's job answers exactly like an id that does not exist.
        message = f"unknown job {job_id}"
        with pytest.raises(ForeignJobError) as read_info:
            jobs.read(job_id, B)
        with pytest.raises(ForeignJobError) as kill_info:
            jobs.kill(job_id, B)
        with pytest.raises(ForeignJobError) as wait_info:
            await jobs.wait(job_id, 1, B)
        with pytest.raises(ForeignJobError) as get_info:
            jobs.get(job_id, B)
        for info in (read_info, kill_info, wait_info, get_info):
            assert str(info.value) == message
            assert isinstance(info.value, UnknownJobError)
            assert isinstance(info.value, LookupError)
        with pytest.raises(ForeignJobError):
            await jobs.stop(job_id, B, "not yours", 1)
        with pytest.raises(UnknownJobError) as unknown:
            jobs.read("subagent-99", A)
        assert str(unknown.value) == "unknown job subagent-99"
        assert not isinstance(unknown.value, ForeignJobError)
        assert jobs.get(job_id, A).status is JobStatus.RUNNING
        assert jobs.list(B) == []
        gate.set()


async def test_unowned_jobs_are_visible_to_everyone_in_start_order() -> None:
    async with JobRegistry() as jobs:
        gate = asyncio.Event()
        jobs.start("subagent", "a1", A, blocked(gate))
        jobs.start("shell", "free", None, blocked(gate))
        jobs.start("subagent", "b1", B, blocked(gate))
        jobs.start("subagent", "a2", A, blocked(gate))
        assert [s.label for s in jobs.list(A)] == ["a1", "free", "a2"]
        assert [s.label for s in jobs.list(B)] == ["free", "b1"]
        gate.set()


async def test_read_is_empty_while_live_then_final_output_and_reported() -> None:
    async with JobRegistry() as jobs:
        gate = asyncio.Event()
        job_id = jobs.start("subagent", "x", A, blocked(gate, name="the answer"))
        assert jobs.read(job_id, A) == ""
        assert jobs.get(job_id, A).reported is False
        gate.set()
        snap = await jobs.wait(job_id, 5, A)
        assert snap.status is JobStatus.COMPLETED
        assert snap.finished_at is not None
        assert snap.finished_at >= snap.started_at
        assert jobs.read(job_id, A) == "the answer"
        assert jobs.read(job_id, A) == "the answer"
        assert jobs.get(job_id, A).reported is True


async def test_raising_work_fails_with_the_exception_name_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="dsh.jobs")

    async def work() -> JobOutcome:
        raise RuntimeError("boom /home/u/.secret OPENAI_API_KEY=sk-canary")

    async with JobRegistry() as jobs:
        job_id = jobs.start("subagent", "x", A, work)
        snap = await jobs.wait(job_id, 5, A)
        assert snap.status is JobStatus.FAILED
        assert snap.detail == "RuntimeError"
        assert snap.status_line == "[status: failed, RuntimeError]"
    # The raw text is on the DEBUG log only.
    assert any("sk-canary" in (r.exc_text or "") for r in caplog.records)


async def test_a_killed_work_keeps_its_own_detail_after_the_reason() -> None:
    async def work() -> JobOutcome:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return JobOutcome(JobStatus.KILLED, detail="dispose failed: the teardown line")
        return answer("never")

    async with JobRegistry() as jobs:
        with_reason = jobs.start("subagent", "x", A, work)
        without = jobs.start("subagent", "y", A, work)
        await asyncio.sleep(0)
        jobs.kill(with_reason, A, reason="not needed")
        jobs.kill(without, A)
        snap = await jobs.wait(with_reason, 5, A)
        assert snap.status_line == (
            "[status: killed, not needed; dispose failed: the teardown line]"
        )
        snap = await jobs.wait(without, 5, A)
        assert snap.status_line == "[status: killed, dispose failed: the teardown line]"


@asynccontextmanager
async def _a_job_closing_slowly(
    close_s: float,
) -> AsyncIterator[tuple[JobRegistry, str, list[float]]]:
    """A registry with one running job of owner ``A`` that, once cancelled, spends ``close_s``
    closing (as a run's close does): the registry, the job's id, and when its close ended."""
    closed: list[float] = []

    async def work() -> JobOutcome:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(close_s)
            closed.append(asyncio.get_running_loop().time())
        return answer("never")

    async with JobRegistry() as jobs:
        job_id = jobs.start("subagent", "x", A, work)
        await asyncio.sleep(0)
        yield jobs, job_id, closed


async def test_close_owner_after_a_kill_waits_for_the_close_and_never_cancels_it() -> None:
    # The run's close, started by the kill's cancel, takes 0.5 s.
    async with _a_job_closing_slowly(0.5) as (jobs, job_id, closed):
        jobs.kill(job_id, A)
        await asyncio.sleep(0.05)
        await jobs.close_owner(A)
        returned = asyncio.get_running_loop().time()
        assert closed, "close_owner cancelled the close the kill had started"
        assert returned >= closed[0]


async def test_kill_cancels_with_reason_and_first_settlement_wins() -> None:
    seen: list[str | None] = []

    async def work() -> JobOutcome:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError as exc:
            seen.append(exc.args[0] if exc.args else None)
            raise
        return answer("never")

    async with JobRegistry() as jobs:
        job_id = jobs.start("subagent", "x", A, work)
        await asyncio.sleep(0)
        assert jobs.kill(job_id, A, reason="not needed") == "requested"
        assert jobs.kill(job_id, A) == "requested"
        snap = await jobs.wait(job_id, 5, A)
        assert snap.status is JobStatus.KILLED
        assert snap.detail == "not needed"
        assert seen == ["not needed"]
        assert jobs.kill(job_id, A) == "already-finished"
        assert jobs.get(job_id, A).status is JobStatus.KILLED


async def test_work_that_finishes_normally_after_a_kill_is_still_killed() -> None:
    async def stubborn() -> JobOutcome:
        await asyncio.sleep(0)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            # A misbehaving work function that turns cancellation into a result.
            return answer("late")
        return answer("never")

    async with JobRegistry() as jobs:
        job_id = jobs.start("subagent", "x", A, stubborn)
        await asyncio.sleep(0.01)
        jobs.kill(job_id, A)
        snap = await jobs.wait(job_id, 5, A)
        assert snap.status is JobStatus.KILLED
        assert jobs.read(job_id, A) == ""


async def test_kill_before_the_work_first_runs_settles_killed() -> None:
    started: list[str] = []
    async with JobRegistry() as jobs:
        job_id = jobs.start("subagent", "x", A, blocked(asyncio.Event(), started, "w"))
        jobs.kill(job_id, A)
        snap = await jobs.wait(job_id, 5, A)
        assert snap.status is JobStatus.KILLED
        assert started == []


async def test_wait_rejects_non_positive_timeouts_and_a_timeout_is_not_an_error() -> None:
    async with JobRegistry() as jobs:
        gate = asyncio.Event()
        job_id = jobs.start("subagent", "x", A, blocked(gate))
        for bad in (0, -1, float("nan")):
            with pytest.raises(JobArgumentError):
                await jobs.wait(job_id, bad, A)
        snap = await jobs.wait(job_id, 0.02, A)
        assert snap.status is JobStatus.RUNNING
        assert snap.reported is False
        gate.set()


async def test_notice_is_sent_only_for_unreported_owned_jobs() -> None:
    events: list[JobDone] = []
    async with JobRegistry() as jobs:
        jobs.on_job_done(events.append)
        gates = {name: asyncio.Event() for name in ("plain", "read", "killed", "waited", "free")}
        ids = {
            name: jobs.start(
                "subagent", f"{name} label", None if name == "free" else A, blocked(gate, name=name)
            )
            for name, gate in gates.items()
        }
        jobs.kill(ids["killed"], A)
        waiter = asyncio.create_task(jobs.wait(ids["waited"], 5, A))
        await asyncio.sleep(0)
        for gate in gates.values():
            gate.set()
        await waiter
        for name, job_id in ids.items():
            await jobs.wait(job_id, 5, None if name == "free" else A)
        by_id = {event.snapshot.id: event for event in events}
        assert len(by_id) == 5
        assert by_id[ids["plain"]].notice == (
            f"background job {ids['plain']} (subagent: plain label) finished "
            "[status: completed]. Read its output with job_output."
        )
        assert by_id[ids["killed"]].notice is None
        assert by_id[ids["killed"]].snapshot.status is JobStatus.KILLED
        assert by_id[ids["waited"]].notice is None
        assert by_id[ids["free"]].notice is None
        # "read" settled unreported (its notice fired); a terminal read afterwards marks it.
        assert by_id[ids["read"]].notice is not None
        jobs.read(ids["read"], A)
        assert jobs.get(ids["read"], A).reported is True


async def test_pulled_notices_skip_read_killed_and_closed_jobs() -> None:
    async with JobRegistry() as jobs:
        done = asyncio.Event()
        done.set()
        unread = jobs.start("subagent", "unread", A, blocked(done, name="u"))
        read = jobs.start("subagent", "read", A, blocked(done, name="r"))
        killed = jobs.start("subagent", "killed", A, blocked(asyncio.Event()))
        other = jobs.start("subagent", "other", B, blocked(asyncio.Event(), name="o"))
        settled = asyncio.Event()
        count: list[JobDone] = []

        def on_done(event: JobDone) -> None:
            count.append(event)
            if len(count) == 3:
                settled.set()

        jobs.on_job_done(on_done)
        jobs.kill(killed, A)
        await asyncio.wait_for(settled.wait(), 5)
        assert jobs.read(read, A) == "r"  # a terminal read: no notice afterwards
        assert jobs.take_notices(A) == [
            f"background job {unread} (subagent: unread) finished [status: completed]."
            " Read its output with job_output."
        ]
        assert jobs.take_notices(A) == []  # each notice is taken once
        await jobs.close_owner(B)  # owner close kills the live job: no notice
        assert jobs.get(other, B).status is JobStatus.KILLED
        assert jobs.take_notices(B) == []
        assert jobs.take_notices(None) == []


async def test_failed_notice_carries_the_detail() -> None:
    events: list[JobDone] = []

    async def work() -> JobOutcome:
        return JobOutcome(JobStatus.FAILED, detail="error; diagnostic: nope")

    async with JobRegistry() as jobs:
        settled = asyncio.Event()

        def on_done(event: JobDone) -> None:
            events.append(event)
            settled.set()

        jobs.on_job_done(on_done)
        job_id = jobs.start("subagent", "fix it", A, work)
        await asyncio.wait_for(settled.wait(), 5)
        assert events[0].notice == (
            f"background job {job_id} (subagent: fix it) finished "
            "[status: failed, error; diagnostic: nope]. Read its output with job_output."
        )


async def test_listeners_run_last_are_contained_and_can_unsubscribe(
    caplog: pytest.LogCaptureFixture,
) -> None:
    order: list[str] = []
    async with JobRegistry() as jobs:
        gate = asyncio.Event()
        job_id = jobs.start("subagent", "x", A, blocked(gate, name="out"))

        def raising(event: JobDone) -> None:
            order.append("raising")
            raise RuntimeError("listener bug")

        def checking(event: JobDone) -> None:
            # State is recorded and waiters released before any listener runs.
            snap = jobs.get(job_id, A)
            order.append(f"checking:{snap.status}:{waiter.done() or 'released'}")
            assert snap.status is JobStatus.COMPLETED
            assert jobs._jobs[job_id].done.is_set()

        removed: list[JobDone] = []
        jobs.on_job_done(raising)
        jobs.on_job_done(checking)
        jobs.on_job_done(removed.append)()
        waiter = asyncio.create_task(jobs.wait(job_id, 5, A))
        await asyncio.sleep(0)
        with caplog.at_level(logging.WARNING, logger="dsh.jobs"):
            gate.set()
            snap = await waiter
        assert snap.status is JobStatus.COMPLETED
        assert order == ["raising", "checking:completed:released"]
        assert removed == []
        assert any("listener raised" in r.getMessage() for r in caplog.records)


async def test_close_owner_cancels_awaits_exit_and_keeps_records_killed() -> None:
    events: list[JobDone] = []
    exited: list[str] = []

    def slow_exit(name: str) -> JobWork:
        async def work() -> JobOutcome:
            try:
                await asyncio.Event().wait()
            finally:
                await asyncio.sleep(0.05)  # teardown that takes a while
                exited.append(name)
            return answer(name)

        return work

    async with JobRegistry() as jobs:
        jobs.on_job_done(events.append)
        a1 = jobs.start("subagent", "a1", A, slow_exit("a1"))
        b1 = jobs.start("subagent", "b1", B, slow_exit("b1"))
        done_gate = asyncio.Event()
        done_gate.set()
        a2 = jobs.start("subagent", "a2", A, blocked(done_gate, name="a2"))
        await jobs.wait(a2, 5, A)
        await asyncio.sleep(0)
        await jobs.close_owner(A)
        assert exited == ["a1"]
        # The records stay: the closed one killed, the finished one as it was.
        assert jobs.get(a1, A).status is JobStatus.KILLED
        assert jobs.get(a2, A).status is JobStatus.COMPLETED
        assert jobs.read(a2, A) == "a2"
        assert jobs.get(b1, B).status is JobStatus.RUNNING
        a1_events = [e for e in events if e.snapshot.id == a1]
        assert [(e.snapshot.status, e.notice) for e in a1_events] == [(JobStatus.KILLED, None)]
        await jobs.aclose()
        assert exited == ["a1", "b1"]
        assert all(e.notice is None for e in events)
        with pytest.raises(JobRegistryClosedError):
            jobs.start("subagent", "late", A, slow_exit("late"))
    # Every record outlives the registry: a later one over the same store reads them.
    async with JobRegistry() as later:
        assert [(s.label, s.status) for s in later.list(A)] == [
            ("a1", JobStatus.KILLED),
            ("a2", JobStatus.COMPLETED),
        ]
        assert [(s.label, s.status) for s in later.list(B)] == [("b1", JobStatus.KILLED)]


def test_outcome_must_be_terminal_and_snapshot_status_line() -> None:
    with pytest.raises(ValueError, match="must be completed, killed or failed"):
        JobOutcome(JobStatus.RUNNING)
    assert JobOutcome("completed").status is JobStatus.COMPLETED  # type: ignore[arg-type]
    assert isinstance(JobStatus.KILLED.terminal, bool)
    assert JobSnapshot.__dataclass_fields__.keys() == {
        "id",
        "kind",
        "label",
        "owner_session",
        "status",
        "detail",
        "started_at",
        "finished_at",
        "reported",
        "where",
        "meta",
    }


def test_jobs_config_rules() -> None:
    with pytest.raises(ValueError, match="max_concurrent_jobs_per_owner"):
        JobsConfig(max_concurrent_jobs_per_owner=0)
    with pytest.raises(ValueError, match="wait_timeout_ms must not exceed"):
        JobsConfig(wait_timeout_ms=10, max_wait_timeout_ms=5)
    with pytest.raises(ValueError, match="extra"):
        JobsConfig(unknown=1)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match='worker_setup is a setting of executor = "ray"'):
        JobsConfig(worker_setup=("otel_setup:configure",))
    with pytest.raises(ValueError, match=r'is not a "package\.module:function" name'):
        JobsConfig(executor="ray", worker_setup=("otel_setup.configure",))
    names: Any = ["pkg.otel_setup:configure"]  # a TOML array arrives as a list
    named = JobsConfig(executor="ray", worker_setup=names)
    assert named.worker_setup == ("pkg.otel_setup:configure",)


async def test_a_cancelled_close_owner_still_waits_for_its_jobs_to_settle() -> None:
    async with _a_job_closing_slowly(0.3) as (jobs, job_id, closed):
        closing = asyncio.create_task(jobs.close_owner(A))
        await asyncio.sleep(0.05)
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing
        assert len(closed) == 1, "close_owner ended while its job was still closing"
        snapshot = jobs.get(job_id, A)
        assert snapshot.status is JobStatus.KILLED
        assert snapshot.reported is True  # a closed job yields no notice
        assert jobs.take_notices(A) == []


async def test_facts_attached_by_work_that_is_then_killed_stay_with_the_job() -> None:
    assert attach_job_meta({"usage": {"input_tokens": 1}}) is False  # no job's work here
    attached = asyncio.Event()
    seen: list[str | None] = []

    async def work() -> JobOutcome:
        seen.append(current_job_id())
        assert attach_job_meta({"usage": {"input_tokens": 5}}) is True
        attached.set()
        await asyncio.Event().wait()  # until killed
        return answer("never")

    async with JobRegistry() as jobs:
        job_id = jobs.start("subagent", "task", A, work)
        await asyncio.wait_for(attached.wait(), 5)
        jobs.kill(job_id, A, "enough")
        snapshot = await jobs.wait(job_id, 5, A)
        assert seen == [job_id]
    assert snapshot.status is JobStatus.KILLED
    assert snapshot.meta == {"usage": {"input_tokens": 5}}
    assert current_job_id() is None


async def test_work_that_queues_reads_queued_with_its_place_in_memory_and_store() -> None:
    place = [3]
    admit, finish = asyncio.Event(), asyncio.Event()

    async def work() -> JobOutcome:
        assert job_queued(lambda: place[0])
        await admit.wait()
        job_admitted()
        await finish.wait()
        return answer("done")

    async with JobRegistry(JobsConfig(store="memory")) as registry:
        job_id = registry.start("w", "queued work", A, work)
        await asyncio.sleep(0)
        stored = registry.store.get(job_id)  # the status and the place at entry
        assert stored is not None
        assert (stored.status, stored.detail) == (JobStatus.QUEUED, "place 3")
        place[0] = 1  # the live place, read by every snapshot in this process
        assert registry.get(job_id, A).status_line == "[status: queued, place 1]"
        admit.set()
        await asyncio.sleep(0)
        assert registry.get(job_id, A).status_line == "[status: running]"
        stored = registry.store.get(job_id)
        assert stored is not None
        assert (stored.status, stored.detail) == (JobStatus.RUNNING, None)
        finish.set()
        assert (await registry.wait(job_id, 5, A)).status is JobStatus.COMPLETED
    assert job_queued(lambda: 1) is False  # outside a job's work: nothing to mark


async def test_a_job_killed_while_its_work_queues_stays_stopping_then_killed() -> None:
    async def work() -> JobOutcome:
        job_queued(lambda: 1)
        try:
            await asyncio.Event().wait()
        finally:
            job_admitted()  # the queue's own cleanup: it must not make the job running
        raise AssertionError("unreachable")

    async with JobRegistry(JobsConfig(store="memory")) as registry:
        job_id = registry.start("w", "queued work", A, work)
        await asyncio.sleep(0)
        assert registry.kill(job_id, A) == "requested"
        assert registry.get(job_id, A).status is JobStatus.STOPPING
        assert (await registry.wait(job_id, 5, A)).status is JobStatus.KILLED
