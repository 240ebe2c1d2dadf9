"""The job tools: exact model-visible texts, schemas, validation and ownership."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dsh.jobs import JobOutcome, JobRegistry, JobsConfig, JobStatus
from dsh.jobs._tools import JOB_LIST_FINISHED_LINES  # not re-exported by dsh.jobs.tools
from dsh.jobs.tools import (
    JOB_TOOL_NAMES,
    JobKillTool,
    JobListTool,
    JobOutputTool,
    ToolBase,
    ToolResult,
    job_tools,
    to_anthropic_tool,
    to_openai_tool,
)


@dataclass(frozen=True)
class Caller:
    session_id: str
    cwd: str | None = None


A = Caller("a")
B = Caller("b")


async def test_job_output_wait_returns_answer_and_status_twice() -> None:
    async with JobRegistry() as jobs:
        output, _, _ = job_tools(jobs)

        async def work() -> JobOutcome:
            await asyncio.sleep(0.02)
            return JobOutcome(JobStatus.COMPLETED, output="the answer")

        job_id = jobs.start("subagent", "task", A, work)
        first = await output.call({"job_id": job_id, "wait": True}, A)
        second = await output.call({"job_id": job_id, "wait": True}, A)
        assert first.text == "the answer\n[status: completed]"
        assert second.text == first.text
        assert first.is_error is False
        assert first.value is not None
        assert first.value["status"] == "completed"


async def test_host_only_facts_reach_the_snapshot_and_job_output_meta_never_its_text() -> None:
    facts = {"usage": {"input_tokens": 11}, "timings": {"answer_s": 0.5}}
    async with JobRegistry() as jobs:
        output, listing, _ = job_tools(jobs)
        release = asyncio.Event()

        async def work(meta: Mapping[str, Any] | None) -> JobOutcome:
            await release.wait()
            return JobOutcome(JobStatus.COMPLETED, output="the answer", meta=meta)

        with_facts = jobs.start("subagent", "task", A, lambda: work(facts))
        without = jobs.start("subagent", "task", A, lambda: work(None))
        running = await output.call({"job_id": with_facts}, A)
        assert running.meta is None  # nothing until the work settled
        release.set()
        snapshot = await jobs.wait(with_facts, 5, A)
        assert snapshot.meta == facts
        read = await output.call({"job_id": with_facts}, A)
        plain = await output.call({"job_id": without, "wait": True}, A)
        assert read.meta == facts
        assert plain.meta is None
        # What a model sees is the same with the facts as without them.
        assert read.text == plain.text
        assert read.value == {**(plain.value or {}), "job_id": with_facts}
        assert read.text == "the answer\n[status: completed]"
        listed = await listing.call({}, A)
        assert listed.meta is None
        assert "input_tokens" not in str(listed.value)


async def test_job_output_without_wait_does_not_block_and_timeout_is_not_error() -> None:
    async with JobRegistry(JobsConfig(wait_timeout_ms=20)) as jobs:
        output, _, kill = job_tools(jobs)
        job_id = jobs.start("subagent", "task", A, asyncio.Event().wait)  # type: ignore[arg-type]
        now = await output.call({"job_id": job_id}, A)
        assert now == ToolResult(now.text, False, now.value)
        assert now.text == "(no new output)\n[status: running]"
        waited = await output.call({"job_id": job_id, "wait": True, "timeout_ms": 10}, A)
        assert waited.text == "(no new output)\n[status: running]"
        assert waited.is_error is False
        defaulted = await output.call({"job_id": job_id, "wait": True}, A)
        assert defaulted.text.endswith("[status: running]")
        killed = await kill.call({"job_id": job_id, "reason": "done with it"}, A)
        # job_kill waits for the job to settle, so its answer is the final status.
        assert killed.text == f"stopped job {job_id} [status: killed, done with it]"
        assert killed.is_error is False
        assert killed.value is not None
        assert (killed.value["result"], killed.value["status"]) == ("requested", "killed")
        snap = jobs.get(job_id, A)
        assert snap.status is JobStatus.KILLED
        again = await kill.call({"job_id": job_id}, A)
        assert again.text == f"job {job_id} had already finished [status: killed, done with it]"
        final = await output.call({"job_id": job_id}, A)
        assert final.text == "(no new output)\n[status: killed, done with it]"


async def test_job_list_lines() -> None:
    async with JobRegistry() as jobs:
        _, listing, _ = job_tools(jobs)
        empty = await listing.call({}, A)
        assert empty.text == "(no background jobs)"
        gate = asyncio.Event()

        async def work() -> JobOutcome:
            await gate.wait()
            return JobOutcome(JobStatus.COMPLETED, output="x")

        fix = jobs.start("subagent", "fix the tests", A, work)
        build = jobs.start("shell", "build", A, work)
        jobs.start("subagent", "not mine", B, work)
        result = await listing.call({}, A)
        assert result.text == (
            f"{fix} [subagent] running — fix the tests\n{build} [shell] running — build"
        )
        assert result.value == {
            "jobs": [
                {
                    "job_id": fix,
                    "kind": "subagent",
                    "label": "fix the tests",
                    "status": "running",
                    "detail": None,
                },
                {
                    "job_id": build,
                    "kind": "shell",
                    "label": "build",
                    "status": "running",
                    "detail": None,
                },
            ],
            "more_finished": 0,
        }
        gate.set()
        await jobs.wait(fix, 5, A)
        await jobs.wait(build, 5, A)
        done = await listing.call({}, A)
        assert set(done.text.splitlines()) == {
            f"{fix} [subagent] completed — fix the tests",
            f"{build} [shell] completed — build",
        }


async def test_job_list_shows_live_jobs_then_the_newest_finished_then_a_count() -> None:
    assert JOB_LIST_FINISHED_LINES == 10
    async with JobRegistry() as jobs:
        _, listing, _ = job_tools(jobs)

        async def finished(n: int) -> JobOutcome:
            return JobOutcome(JobStatus.COMPLETED, output=str(n))

        done = []
        for n in range(13):
            job_id = jobs.start("subagent", f"done {n}", A, functools.partial(finished, n))
            await jobs.wait(job_id, 5, A)
            done.append(job_id)
        gate = asyncio.Event()

        async def live() -> JobOutcome:
            await gate.wait()
            return JobOutcome(JobStatus.COMPLETED)

        running = jobs.start("shell", "still going", A, live)
        jobs.start("subagent", "not mine", B, live)
        result = await listing.call({}, A)
        lines = result.text.splitlines()
        assert lines == [
            f"{running} [shell] running — still going",
            *(f"{done[n]} [subagent] completed — done {n}" for n in range(12, 2, -1)),
            "and 3 more finished jobs",
        ]
        assert result.value is not None
        assert result.value["more_finished"] == 3
        assert len(result.value["jobs"]) == 1 + JOB_LIST_FINISHED_LINES
        gate.set()


async def test_job_list_shows_the_most_recently_finished_even_if_it_started_first() -> None:
    async with JobRegistry() as jobs:
        _, listing, _ = job_tools(jobs)
        gate = asyncio.Event()

        async def long() -> JobOutcome:
            await gate.wait()
            return JobOutcome(JobStatus.COMPLETED, output="long")

        async def short() -> JobOutcome:
            return JobOutcome(JobStatus.COMPLETED, output="short")

        first = jobs.start("subagent", "started first, finished last", A, long)
        for n in range(JOB_LIST_FINISHED_LINES):
            await jobs.wait(jobs.start("subagent", f"short {n}", A, short), 5, A)
        gate.set()
        await jobs.wait(first, 5, A)
        assert jobs.store.flush(5)
        for _ in range(100):  # until memory let the durable jobs go (bounded)
            if not jobs._jobs:
                break
            await asyncio.sleep(0.01)
        assert not jobs._jobs
        result = await listing.call({}, A)
        assert result.text.splitlines()[0] == (
            f"{first} [subagent] completed — started first, finished last"
        )


async def test_job_kill_that_outlasts_kill_wait_ms_says_the_job_is_still_stopping() -> None:
    closed = asyncio.Event()

    async def slow_close() -> JobOutcome:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.4)  # a teardown longer than kill_wait_ms
            closed.set()
        return JobOutcome(JobStatus.COMPLETED)

    async with JobRegistry(JobsConfig(kill_wait_ms=50)) as jobs:
        _, _, kill = job_tools(jobs)
        job_id = jobs.start("subagent", "task", A, slow_close)
        await asyncio.sleep(0)
        answer = await kill.call({"job_id": job_id}, A)
        assert answer.text == f"requested cancellation of job {job_id}; it is still stopping"
        assert answer.is_error is False
        assert answer.value is not None
        assert (answer.value["result"], answer.value["status"]) == ("requested", "stopping")
        assert not closed.is_set()
        snapshot = await jobs.wait(job_id, 5, A)
        assert snapshot.status is JobStatus.KILLED
        assert closed.is_set()
        again = await kill.call({"job_id": job_id}, A)
        assert again.text == f"job {job_id} had already finished [status: killed]"


async def test_validation_and_ownership_errors() -> None:
    async with JobRegistry() as jobs:
        output, listing, kill = job_tools(jobs)
        job_id = jobs.start("subagent", "task", A, asyncio.Event().wait)  # type: ignore[arg-type]
        cases: list[tuple[JobOutputTool | JobListTool | JobKillTool, dict[str, Any], str]] = [
            (output, {}, 'invalid arguments: missing required field "job_id"'),
            (
                output,
                {"job_id": ""},
                'invalid arguments: field "job_id" must be a non-empty string',
            ),
            (
                output,
                {"job_id": job_id, "wait": 1},
                'invalid arguments: field "wait" must be a boolean',
            ),
            (
                output,
                {"job_id": job_id, "timeout_ms": 0},
                'invalid arguments: field "timeout_ms" must be greater than 0',
            ),
            (
                output,
                {"job_id": job_id, "follow": True},
                'invalid arguments: unknown field "follow"',
            ),
            (listing, {"all": True}, 'invalid arguments: unknown field "all"'),
            (kill, {"reason": "x"}, 'invalid arguments: missing required field "job_id"'),
            (output, {"job_id": "subagent-9"}, "unknown job subagent-9"),
            (kill, {"job_id": "nope-1"}, "unknown job nope-1"),
        ]
        for tool, arguments, text in cases:
            result = await tool.call(arguments, A)
            assert (result.text, result.is_error) == (text, True), arguments
        for tool in (output, kill):
            foreign = await tool.call({"job_id": job_id}, B)
            # Another owner's job is answered exactly like an id that does not exist.
            assert foreign.text == f"unknown job {job_id}"
            assert foreign.is_error is True
        assert jobs.get(job_id, A).status is JobStatus.RUNNING


def test_schemas_descriptions_and_exports() -> None:
    jobs = JobRegistry()
    tools = job_tools(jobs)
    assert tuple(t.name for t in tools) == JOB_TOOL_NAMES
    output, listing, kill = tools
    assert isinstance(output, JobOutputTool)
    assert isinstance(listing, JobListTool)
    assert isinstance(kill, JobKillTool)
    assert output.input_schema["required"] == ["job_id"]
    assert sorted(output.input_schema["properties"]) == ["job_id", "timeout_ms", "wait"]
    assert sorted(kill.input_schema["properties"]) == ["job_id", "reason"]
    assert listing.input_schema["properties"] == {}
    for tool in tools:
        assert tool.input_schema["additionalProperties"] is False
        assert to_openai_tool(tool) == tool.to_openai_tool()
        assert to_openai_tool(tool)["function"]["name"] == tool.name
        assert to_anthropic_tool(tool)["input_schema"] == tool.input_schema
    output.input_schema["required"].append("mutated")
    assert output.input_schema["required"] == ["job_id"]
    assert "wait: true" in output.description
    assert "[status: ...]" in output.description
    assert "returns at once" not in kill.description.lower()
    assert "returns once the job's processes have exited" in kill.description.lower()
    assert "still stopping" in kill.description
    assert "killed" in kill.description
    assert "subagent-3f9a0c12be47" in output.input_schema["properties"]["job_id"]["description"]


class EchoTool(ToolBase[Caller]):
    """A tool written on the shared base: it gets the schema check and the exporters for free."""

    name = "echo"
    description = "Echo a word."

    def __init__(self) -> None:
        super().__init__(
            {
                "type": "object",
                "properties": {"word": {"type": "string", "minLength": 1}},
                "required": ["word"],
                "additionalProperties": False,
            }
        )

    async def _call(self, arguments: Mapping[str, Any], caller: Caller) -> ToolResult:
        return ToolResult(text=f"{caller.session_id}: {arguments['word']}")


async def test_every_job_tool_and_a_new_tool_share_one_base() -> None:
    assert all(isinstance(tool, ToolBase) for tool in job_tools(JobRegistry()))
    echo = EchoTool()
    assert await echo.call({"word": "hi"}, A) == ToolResult(text="a: hi")
    assert await echo.call({"word": " "}, A) == ToolResult(
        text='invalid arguments: field "word" must be a non-empty string', is_error=True
    )
    assert await echo.call({}, A) == ToolResult(
        text='invalid arguments: missing required field "word"', is_error=True
    )
    assert echo.to_openai_tool() == to_openai_tool(echo)
    assert echo.to_anthropic_tool() == {
        "name": "echo",
        "description": "Echo a word.",
        "input_schema": echo.input_schema,
    }
    echo.input_schema["required"].append("mutated")
    assert echo.input_schema["required"] == ["word"]
    assert repr(echo) == "<EchoTool echo>"


def test_job_tools_carry_their_own_behaviour_hints() -> None:
    # The MCP layer turns these into annotations; only MCP's four hint names are meaningful.
    known = {"read_only", "destructive", "idempotent", "open_world"}
    hints = {tool.name: tool.behaviour_hints for tool in job_tools(JobRegistry())}
    assert all(tool.is_job_tool for tool in job_tools(JobRegistry()))
    assert hints["job_output"] == hints["job_list"] == {"read_only": True, "open_world": False}
    assert hints["job_kill"] == {
        "read_only": False,
        "destructive": True,
        "idempotent": True,
        "open_world": False,
    }
    assert all(value is not None and set(value) <= known for value in hints.values())
    assert ToolBase.behaviour_hints is None
    assert ToolBase.is_job_tool is False
