"""Host-only facts of a delegation (usage, dsh's timings): on ``meta``, never in a model's text."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from dsh.jobs import JobRegistry, JobSnapshot, JobStatus
from dsh.jobs.tools import JobOutputTool
from dsh.subagent import (
    StopReason,
    SubagentResult,
    SubagentService,
    UsageFacts,
)
from dsh.subagent.testing import FakeProvider
from dsh.tool_subagent import Caller, SubagentTool, SubagentToolConfig, ToolResult
from dsh.tool_subagent._run_report import from_job, from_tool_result

CALLER = Caller(session_id="s1", cwd="/tmp")
USAGE = UsageFacts(input_tokens=11, output_tokens=7, cost_usd=0.25)
STAGES = ["started_s", "first_activity_s", "answer_s", "tree_exit_s"]


def reporting(**options: Any) -> FakeProvider:
    """A FakeProvider whose runs report usage facts, as both product providers' runs do."""
    return FakeProvider(usage=USAGE, **options)


def mount(provider: FakeProvider) -> tuple[SubagentTool, JobRegistry]:
    service = SubagentService()
    service.register(provider)
    jobs = JobRegistry()
    config = SubagentToolConfig(provider=provider.name, max_depth="provider-managed")
    return SubagentTool(config, service, jobs), jobs


def assert_timings(timings: dict[str, float], *, start: float, answer: float) -> None:
    assert list(timings) == STAGES
    values = [timings[stage] for stage in STAGES]
    assert values == sorted(values)
    assert timings["started_s"] >= start
    assert timings["answer_s"] - timings["started_s"] >= answer


async def test_a_foreground_result_carries_usage_and_timings_and_the_same_text() -> None:
    tool, _ = mount(reporting(start_delay=0.05, delay=0.1))
    plain_tool, _ = mount(FakeProvider())
    arguments = {"description": "d", "prompt": "the answer"}
    result = await tool.call(arguments, CALLER)
    plain = await plain_tool.call(arguments, CALLER)
    assert result.meta is not None
    assert result.meta["usage"] == {"input_tokens": 11, "output_tokens": 7, "cost_usd": 0.25}
    assert_timings(result.meta["timings"], start=0.05, answer=0.1)
    # The model-visible parts are those of a run that reported nothing.
    assert (result.text, result.is_error, result.value) == (plain.text, False, plain.value)
    assert result == plain  # meta takes no part in equality
    assert "input_tokens" not in str(result.value)
    report = from_tool_result(result, 1.0, 0).to_json()
    assert report["usage"] == result.meta["usage"]
    assert report["timings"] == result.meta["timings"]


async def test_a_run_without_usage_still_has_timings() -> None:
    tool, _ = mount(FakeProvider(delay=0.02))
    result = await tool.call({"description": "d", "prompt": "p"}, CALLER)
    assert result.meta is not None
    assert list(result.meta) == ["timings"]
    assert "usage" not in from_tool_result(result, 1.0, 0).to_json()


async def test_a_background_job_keeps_the_facts_for_the_host(
    started_id: Callable[[ToolResult], str],
) -> None:
    tool, jobs = mount(reporting(start_delay=0.02, delay=0.05))
    async with jobs:
        started = await tool.call(
            {"description": "bg", "prompt": "bg answer", "run_in_background": True}, CALLER
        )
        assert started.meta is None
        job_id = started_id(started)
        snapshot = await jobs.wait(job_id, 5, CALLER)
        assert snapshot.status is JobStatus.COMPLETED
        assert snapshot.meta is not None
        assert snapshot.meta["usage"] == USAGE.as_json()
        assert_timings(snapshot.meta["timings"], start=0.02, answer=0.05)
        read = await JobOutputTool(jobs).call({"job_id": job_id}, CALLER)
        assert read.text == "bg answer\n[status: completed]"
        assert read.meta == snapshot.meta
        report = from_job(snapshot, "bg answer", 1.0, 0).to_json()
        assert (report["usage"], report["timings"]) == (
            snapshot.meta["usage"],
            snapshot.meta["timings"],
        )


async def test_a_failed_and_a_killed_background_run_keep_their_facts(
    started_id: Callable[[ToolResult], str],
) -> None:
    error = SubagentResult(StopReason.ERROR, (), "a safe diagnostic")
    tool, jobs = mount(reporting(result=error, delay=0.02))
    async with jobs:
        started = await tool.call(
            {"description": "f", "prompt": "p", "run_in_background": True}, CALLER
        )
        failed = await jobs.wait(started_id(started), 5, CALLER)
        assert failed.status is JobStatus.FAILED
        assert failed.meta is not None
        assert failed.meta["usage"] == USAGE.as_json()
    hanging, jobs = mount(reporting(delay=None))
    async with jobs:
        started = await hanging.call(
            {"description": "k", "prompt": "p", "run_in_background": True}, CALLER
        )
        job_id = started_id(started)
        await asyncio.sleep(0.02)
        jobs.kill(job_id, CALLER, "stop")
        killed: JobSnapshot = await jobs.wait(job_id, 5, CALLER)
        assert killed.status is JobStatus.KILLED
        # The work ended by the cancellation it was sent, yet what the run had spent stays:
        # its usage, and the stages it reached (no model output, no answer; the tree's exit
        # was proven).
        assert killed.meta is not None
        assert killed.meta["usage"] == USAGE.as_json()
        assert list(killed.meta["timings"]) == ["started_s", "tree_exit_s"]
        read = await JobOutputTool(jobs).call({"job_id": job_id}, CALLER)
        assert read.text == "(no new output)\n[status: killed, stop]"
        assert read.meta == killed.meta
