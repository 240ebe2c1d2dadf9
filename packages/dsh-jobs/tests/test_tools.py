"""The job tools: exact model-visible texts, schemas, validation and ownership."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dsh.jobs import JobOutcome, JobRegistry, JobsConfig, JobStatus
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
        assert killed.text == f"requested cancellation of job {job_id}"
        snap = await jobs.wait(job_id, 5, A)
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

        jobs.start("subagent", "fix the tests", A, work)
        jobs.start("shell", "build", A, work)
        jobs.start("subagent", "not mine", B, work)
        result = await listing.call({}, A)
        assert result.text == (
            "subagent-1 [subagent] running — fix the tests\nshell-1 [shell] running — build"
        )
        gate.set()


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
            assert foreign.text == f"job {job_id} belongs to another session"
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
    assert "returns at once" in kill.description.lower()
    assert "killed" in kill.description


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
