"""``AgentSession``, the owner the framework adapters call tools as, with ``FakeProvider``.

No product and no framework runs here; the adapters drive the real products in
``tests-e2e/frameworks``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from dsh.jobs import JobRegistry
from dsh.jobs.tools import ToolBase, ToolResult, job_tools
from dsh.subagent import SubagentService
from dsh.subagent.testing import FakeProvider
from dsh.tool_subagent import AgentSession, Caller, Harness, SubagentTool, SubagentToolConfig
from dsh.tool_subagent._agent_session import CLOSED_TEXT, instructions_for

RELATIVE = Path("relative/dir")
RELATIVE_ABSOLUTE = str(RELATIVE.absolute())  # the tests run in one working directory


class Exploding(ToolBase[Caller]):
    name = "explode"
    description = "raises with a secret in its message"

    def __init__(self) -> None:
        super().__init__({"type": "object", "properties": {}, "additionalProperties": False})

    async def _call(self, arguments: Mapping[str, Any], caller: Caller) -> ToolResult:
        raise RuntimeError("/home/someone/.secret sk-live-123")


def make_harness(provider: FakeProvider, *extra: Any) -> Harness:
    service = SubagentService()
    jobs = JobRegistry()
    service.register(provider)
    config = SubagentToolConfig(
        provider=provider.name, tool_name="subagent_fake", max_depth="provider-managed"
    )
    tools = (SubagentTool(config, service, jobs), *extra, *job_tools(jobs))
    return Harness(service, jobs, tools, {provider.name: "fake"})


def bg(label: str) -> dict[str, Any]:
    return {"description": label, "prompt": "p", "run_in_background": True}


def test_the_instructions_text_is_exact_and_names_every_job_tool() -> None:
    # Model-visible: the job tools' clauses come from their classes (JOB_TOOLS_GUIDE).
    assert instructions_for(make_harness(FakeProvider())) == (
        "Delegate self-contained tasks to coding-agent subagents (delegation tools:"
        " subagent_fake). A call with run_in_background: true returns a job id at once. When a"
        " background job finishes, its completion notice is appended to the result of your next"
        " dsh tool call; read the output with job_output (wait: true blocks until it finishes),"
        " list jobs with job_list and stop one with job_kill."
    )


async def test_a_foreground_call_answers_and_an_unknown_tool_is_named() -> None:
    async with make_harness(FakeProvider("fake")) as harness:
        session = AgentSession(harness, cwd=RELATIVE)
        answer = await session.call("subagent_fake", {"description": "d", "prompt": "hello"})
        unknown = await session.call("nope", {})
        bad = await session.call("subagent_fake", {"prompt": "x"})
        await session.aclose()
    assert session.caller.session_id.startswith("agent-")
    assert session.caller.cwd == RELATIVE_ABSOLUTE
    assert (answer.text, answer.is_error) == ("hello", False)
    assert unknown == ToolResult(
        text='unknown tool "nope" (tools: subagent_fake, job_output, job_list, job_kill)',
        is_error=True,
    )
    assert bad == ToolResult(
        text='invalid arguments: missing required field "description"', is_error=True
    )


async def test_a_tool_that_raises_gives_only_its_exception_type() -> None:
    harness = make_harness(FakeProvider("fake"), Exploding())
    async with harness, AgentSession(harness) as session:
        result = await session.call("explode", {})
    assert result == ToolResult(text="tool explode failed: RuntimeError", is_error=True)


async def test_a_notice_rides_on_the_next_result_once_after_a_blank_line(
    started_id: Callable[[ToolResult], str],
) -> None:
    harness = make_harness(FakeProvider("fake", delay=0.0))
    async with harness, AgentSession(harness) as session:
        started = await session.call("subagent_fake", bg("one"))
        async with asyncio.timeout(5):
            while not harness.jobs.list(session.caller)[0].terminal:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        first = await session.call("job_list", {})
        second = await session.call("job_list", {})
    job_id = started_id(started)
    listing = f"{job_id} [subagent] completed — one"
    notice = (
        f"background job {job_id} (subagent: one) finished [status: completed]."
        " Read its output with job_output."
    )
    assert first.text == f"{listing}\n\n{notice}"
    assert second.text == listing


async def test_sessions_are_separate_owners_and_closing_one_ends_only_its_jobs(
    started_id: Callable[[ToolResult], str],
) -> None:
    provider = FakeProvider("fake", delay=None)  # runs until cancelled
    async with make_harness(provider) as harness:
        mine, other = AgentSession(harness), AgentSession(harness)
        mine_id = started_id(await mine.call("subagent_fake", bg("mine")))
        started_id(await other.call("subagent_fake", bg("other")))
        foreign = await other.call("job_output", {"job_id": mine_id})
        await mine.aclose()
        assert len(provider.open_runs) == 1  # only other's run is left
        after = await mine.call("job_list", {})
        (left,) = harness.jobs.list(other.caller)
        await other.aclose()
    # Another session's job answers exactly as an unknown id would.
    assert foreign == ToolResult(text=f"unknown job {mine_id}", is_error=True)
    assert after == ToolResult(text=CLOSED_TEXT, is_error=True)
    assert left.label == "other"
    assert len(provider.open_runs) == 0


async def test_closing_cancels_a_running_call_which_ends_closed_and_its_run_closed() -> None:
    provider = FakeProvider("fake", delay=None)
    async with make_harness(provider) as harness:
        session = AgentSession(harness)
        call = asyncio.create_task(
            session.call("subagent_fake", {"description": "d", "prompt": "p"})
        )
        async with asyncio.timeout(5):
            while not provider.open_runs:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        await session.aclose()
        assert provider.open_runs == ()  # closed before aclose returned
        result = await call
    assert result == ToolResult(text=CLOSED_TEXT, is_error=True)


async def test_a_cancelled_call_returns_after_its_run_closed_even_if_cancelled_again() -> None:
    provider = FakeProvider("fake", delay=None)
    async with make_harness(provider) as harness, AgentSession(harness) as session:
        call = asyncio.create_task(
            session.call("subagent_fake", {"description": "d", "prompt": "p"})
        )
        async with asyncio.timeout(5):
            while not provider.open_runs:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        call.cancel()
        await asyncio.sleep(0)
        call.cancel()  # a framework that repeats its cancel
        with pytest.raises(asyncio.CancelledError):
            await call
        assert provider.open_runs == ()
