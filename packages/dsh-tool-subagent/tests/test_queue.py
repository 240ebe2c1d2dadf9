"""The fair queue (``max_concurrent``) with scripted providers: the serving order, the limit at
every moment, a queued job's status, place, kill and facts, a foreground wait inside
``timeout_s``, the profile key.

The real-product proof (3 owners x 10 jobs, a ``/proc`` walk) is tests-e2e/test_queue_real.py.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

import pytest

from dsh.jobs import JobRegistry, JobStatus
from dsh.jobs.tools import job_tools
from dsh.subagent import ResolvedStartRequest, SubagentService
from dsh.subagent.testing import FakeProvider, FakeRun
from dsh.tool_subagent import Caller, Harness, SubagentTool, SubagentToolConfig
from dsh.tool_subagent._limits import limit_text
from dsh.tool_subagent._queue import RunQueue, queue_for
from dsh.tool_subagent.errors import ProfileError

_NAMES = itertools.count()


def fresh(prefix: str) -> str:
    """A provider name of its own: the queues are per provider name and per process."""
    return f"{prefix}{next(_NAMES)}"


class Counting(FakeProvider):
    """Runs whose number in flight (started, not closed) is sampled at every start."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.peak = 0
        self.owners: list[str] = []

    async def start(self, request: ResolvedStartRequest) -> FakeRun:
        run = await super().start(request)
        self.owners.append(request.parent.session_id)
        self.peak = max(self.peak, len(self.open_runs))
        return run


def harness(provider: FakeProvider, max_concurrent: int | None, **limits: Any) -> Harness:
    service = SubagentService()
    service.register(provider)
    jobs = JobRegistry()
    config = SubagentToolConfig(
        provider=provider.name, tool_name="subagent_fake", max_depth="provider-managed", **limits
    )
    tool = SubagentTool(config, service, jobs, max_concurrent=max_concurrent)
    return Harness(service, jobs, (tool, *job_tools(jobs)), {provider.name: "fake"})


def bg(label: str) -> dict[str, Any]:
    return {"description": label, "prompt": "p", "run_in_background": True}


async def two_jobs(h: Harness, caller: Caller) -> tuple[str, str]:
    """Two background jobs of ``caller``: the first running, the second in its place."""
    tool = h.delegation_tools[0]
    ids = [(await tool.call(bg(label), caller)).value for label in ("one", "two")]
    await asyncio.sleep(0.01)
    return ids[0]["job_id"], ids[1]["job_id"]  # type: ignore[index]


# ---- the queue alone ------------------------------------------------------------------------


async def test_owners_are_served_in_turn_and_the_limit_holds() -> None:
    queue = RunQueue(fresh("q"))
    starts: list[str] = []
    peak = 0
    release = asyncio.Event()

    async def one(owner: str) -> None:
        nonlocal peak
        admission = await queue.enter(owner, 2, None)
        assert admission is not None
        starts.append(owner)
        peak = max(peak, queue.in_flight)
        await release.wait()
        release.clear()
        queue.leave()

    tasks = [asyncio.create_task(one(o)) for o in "abc" for _ in range(10)]
    await asyncio.sleep(0)
    assert starts == ["a", "a"]
    assert queue.waiting == 28
    while len(starts) < 30 or queue.in_flight:
        release.set()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert peak == 2
    # After the two that found free slots, one start per owner in turn.
    assert starts[2:] == ["a", "b", "c"] * 8 + ["b", "c"] * 2


async def test_places_follow_the_turn_order_and_a_cancelled_waiter_leaves() -> None:
    queue = RunQueue(fresh("q"))
    first = await queue.enter("a", 1, None)
    assert first is not None
    assert first.place == 0
    assert first.order == 1
    waiting = {
        key: asyncio.create_task(queue.enter(owner, 1, None))
        for key, owner in [("a2", "a"), ("a3", "a"), ("b1", "b")]
    }
    await asyncio.sleep(0)
    places = [queue.place(w) for ws in queue._waiting.values() for w in ws]
    assert places == [1, 3, 2]  # a2, a3 after b1: the owners alternate
    waiting["a2"].cancel()
    await asyncio.sleep(0)
    assert queue.waiting == 2
    assert queue.in_flight == 1
    places = [queue.place(w) for ws in queue._waiting.values() for w in ws]
    assert places == [1, 2]  # a3 moved up: owner a's turn was not spent
    async with asyncio.timeout(1):
        queue.leave()
        admitted = await waiting["a3"]
        assert admitted is not None
        assert admitted.place == 2
        assert admitted.order == 2
        queue.leave()
        last = await waiting["b1"]
        assert last is not None
        assert last.place == 2
        assert last.order == 3
        queue.leave()
    assert queue.in_flight == 0
    assert queue.waiting == 0


async def test_a_deadline_in_the_queue_returns_none_and_frees_the_place() -> None:
    queue = RunQueue(fresh("q"))
    held = await queue.enter("a", 1, None)
    assert held is not None
    loop = asyncio.get_running_loop()
    assert await queue.enter("b", 1, loop.time() + 0.02) is None
    assert queue.waiting == 0
    assert queue.in_flight == 1
    queue.leave()


# ---- through the tool -----------------------------------------------------------------------


async def test_three_owners_ten_jobs_each_interleave_under_the_limit() -> None:
    provider = Counting(fresh("fair"), delay=0.01)
    async with harness(provider, 2) as h:
        tool = h.delegation_tools[0]
        owners = [Caller(session_id=f"owner-{o}", cwd="/tmp") for o in "abc"]
        ids: dict[str, list[str]] = {}
        for caller in owners:
            ids[caller.session_id] = []
            for n in range(10):
                started = await tool.call(bg(f"{caller.session_id}-{n}"), caller)
                ids[caller.session_id].append(started.value["job_id"])  # type: ignore[index]
        await asyncio.sleep(0)  # each job's task takes its place at its first step
        queued = h.jobs.get(ids["owner-c"][9], owners[2])
        assert queued.status is JobStatus.QUEUED
        assert queued.detail is not None
        assert queued.detail.startswith("place ")
        for caller in owners:
            for job_id in ids[caller.session_id]:
                await h.jobs.wait(job_id, 10, caller)
        assert provider.peak == 2
        assert len(provider.owners) == 30
        tail = provider.owners[2:]
        # Served in turn: every three consecutive starts (until owner a runs out) are the three.
        for i in range(0, 24, 3):
            assert sorted(tail[i : i + 3]) == ["owner-a", "owner-b", "owner-c"], tail
        done = h.jobs.get(ids["owner-c"][9], owners[2])
        assert done.status is JobStatus.COMPLETED
        facts = dict(done.meta or {})["queue"]
        assert facts["max_concurrent"] == 2
        assert facts["place"] >= 1
        assert facts["waited_s"] > 0
        assert facts["order"] == 30


async def test_killing_a_queued_job_returns_at_once_and_starts_nothing() -> None:
    provider = Counting(fresh("kill"), delay=None)  # runs end only when cancelled
    caller = Caller(session_id="s1", cwd="/tmp")
    async with harness(provider, 1) as h:
        running, waiting = await two_jobs(h, caller)
        snapshot = h.jobs.get(waiting, caller)
        assert (snapshot.status, snapshot.detail) == (JobStatus.QUEUED, "place 1")
        assert h.jobs.get(running, caller).status is JobStatus.RUNNING
        kill = h.tool("job_kill")
        began = time.perf_counter()
        killed = await kill.call({"job_id": waiting}, caller)
        took = time.perf_counter() - began
        assert took < 0.05, took
        assert killed.text.startswith(f"stopped job {waiting} [status: killed")
        assert len(provider.requests) == 1
        await kill.call({"job_id": running}, caller)
        assert provider.peak == 1


async def test_a_foreground_call_waits_in_the_queue_inside_its_timeout() -> None:
    provider = Counting(fresh("fg"), delay=None)
    caller = Caller(session_id="s1", cwd="/tmp")
    async with harness(provider, 1, timeout_s=0.2) as h:
        tool = h.delegation_tools[0]
        queue = queue_for(provider.name)  # one queue per provider in the process
        assert await queue.enter("another owner", 1, None) is not None  # holds the one slot
        began = time.perf_counter()
        result = await tool.call({"description": "d", "prompt": "p"}, caller)
        took = time.perf_counter() - began
        assert result.is_error
        assert result.text == limit_text("timeout_s", 0.2)
        assert 0.15 < took < 0.5, took
        assert provider.requests == []
        assert queue.waiting == 0
        queue.leave()


async def test_a_foreground_answer_carries_its_queue_facts() -> None:
    provider = Counting(fresh("facts"), delay=0.0)
    async with harness(provider, 3) as h:
        result = await h.delegation_tools[0].call(
            {"description": "d", "prompt": "p"}, Caller(session_id="s1", cwd="/tmp")
        )
        assert not result.is_error
        assert result.meta is not None
        assert result.meta["queue"] == {
            "max_concurrent": 3,
            "place": 0,
            "order": 1,
            "waited_s": result.meta["queue"]["waited_s"],
        }


async def test_dsh_run_json_prints_the_queue_facts() -> None:
    import io

    from dsh.tool_subagent._cli import run_command

    provider = Counting(fresh("report"), delay=0.0)
    out = io.StringIO()
    async with harness(provider, 2) as h:
        assert await run_command(h, "task", cwd="/tmp", as_json=True, stdout=out) == 0
    report = json.loads(out.getvalue())
    assert report["queue"]["max_concurrent"] == 2
    assert report["queue"]["order"] == 1


@pytest.mark.parametrize("value", [0, -1, 1.5, "2", True])
def test_a_bad_max_concurrent_is_rejected_naming_the_field(value: object) -> None:
    profile = {"provider": [{"kind": "fake", "max_concurrent": value}]}
    with pytest.raises(ProfileError) as info:
        Harness.from_profile(profile)
    assert info.value.field == "provider[0].max_concurrent"


def test_a_portable_job_carries_the_limit_only_when_set() -> None:
    from dsh.subagent import Parent, SubagentStartRequest, TextBlock
    from dsh.tool_subagent._portable_job import portable_delegation

    request = SubagentStartRequest(
        prompt=(TextBlock("p"),), parent=Parent(session_id="s", cwd="/tmp"), label="d"
    )
    assert "max_concurrent" not in portable_delegation("fake", {}, request).arguments
    work = portable_delegation("fake", {}, request, max_concurrent=2)
    assert work.arguments["max_concurrent"] == 2  # each worker process queues on its own


async def test_dsh_jobs_show_reads_the_place_then_the_queue_facts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from dsh.tool_subagent._cli import main

    def show(job_id: str) -> dict[str, Any]:
        assert main(["jobs", "show", job_id, "--json"]) == 0
        shown: dict[str, Any] = json.loads(capsys.readouterr().out)
        return shown

    provider = Counting(fresh("show"), delay=None)
    caller = Caller(session_id="s1", cwd="/tmp")
    async with harness(provider, 1) as h:
        first, second = await two_jobs(h, caller)
        assert h.jobs.store.flush(5)
        shown = await asyncio.to_thread(show, second)  # the store, as another process reads it
        assert (shown["status"], shown["detail"], shown["queue"]) == ("queued", "place 1", None)
        provider.runs[0].finish()
        await h.jobs.wait(first, 5, caller)
        await asyncio.sleep(0.01)
        provider.runs[1].finish()
        await h.jobs.wait(second, 5, caller)
        assert h.jobs.store.flush(5)
        shown = await asyncio.to_thread(show, second)
        assert shown["status"] == "completed"
        assert shown["queue"]["place"] == 1
        assert shown["queue"]["order"] >= 2
        assert shown["queue"]["waited_s"] > 0


async def test_the_wait_is_the_dsh_queue_span_with_its_facts() -> None:
    from otel_capture import capture

    provider = Counting(fresh("span"), delay=0.0)
    with capture().recording() as exporter:  # it clears the spans when it ends
        async with harness(provider, 2) as h:
            result = await h.delegation_tools[0].call(
                {"description": "d", "prompt": "p"}, Caller(session_id="s1", cwd="/tmp")
            )
        spans = {span.name: span for span in exporter.get_finished_spans()}
    assert result.meta is not None
    attributes = dict(spans["dsh.queue"].attributes or {})
    assert attributes == {f"dsh.queue.{k}": v for k, v in result.meta["queue"].items()}
    assert spans["dsh.queue"].parent is not None
