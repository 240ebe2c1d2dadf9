"""SubagentTool: schema, config rules at mount, foreground and background paths (FakeProvider)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from dsh.jobs import JobRegistry, JobStatus
from dsh.subagent import (
    Capabilities,
    ResolvedStartRequest,
    StopReason,
    SubagentResult,
    SubagentService,
    TextBlock,
)
from dsh.subagent.kit import FailureFacts, failure_line
from dsh.subagent.testing import FakeProvider
from dsh.tool_subagent import Caller, SubagentTool, SubagentToolConfig, Tool, ToolResult
from dsh.tool_subagent.errors import MountError

CALLER = Caller(session_id="s1", cwd="/tmp")
STARTED = re.compile(r"started background subagent job (subagent-[0-9a-f]{12})")


def started_id(out: ToolResult) -> str:
    """The id a background start returned: its text names it, and its value carries it."""
    match = STARTED.fullmatch(out.text)
    assert not out.is_error, out.text
    assert match is not None, out.text
    assert out.value == {"job_id": match.group(1)}
    return match.group(1)


class CountingProvider(FakeProvider):
    """A FakeProvider whose runs count aclose() calls."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.acloses: dict[str, int] = {}
        self.dispose_error: Exception | None = None
        self.close_delay = 0.0
        self.closes_finished = 0
        self.started = asyncio.Event()

    async def start(self, request: ResolvedStartRequest) -> Any:
        run = await super().start(request)
        original = run.aclose
        self.acloses[run.id] = 0

        async def aclose() -> None:
            self.acloses[run.id] += 1
            await asyncio.sleep(self.close_delay)  # a teardown that takes a while
            await original()
            self.closes_finished += 1
            if self.dispose_error is not None:
                raise self.dispose_error

        run.aclose = aclose  # type: ignore[method-assign]
        self.started.set()
        return run


def mount(provider: FakeProvider, **config: Any) -> tuple[SubagentTool, JobRegistry]:
    service = SubagentService()
    service.register(provider)
    jobs = JobRegistry()
    config.setdefault("max_depth", "provider-managed")
    return SubagentTool(SubagentToolConfig(provider=provider.name, **config), service, jobs), jobs


def test_parameters_and_description() -> None:
    tool, _ = mount(FakeProvider())
    assert isinstance(tool, Tool)
    schema = tool.input_schema
    assert list(schema["properties"]) == ["description", "prompt", "run_in_background"]
    assert schema["required"] == ["description", "prompt"]
    assert schema["additionalProperties"] is False
    assert "does not see this conversation" in tool.description
    assert tool.description.endswith(
        "This call waits for the result by default. Set run_in_background: true to return a job"
        " id; collect with job_output and stop with job_kill."
    )
    assert tool.to_openai_tool()["function"]["parameters"] == schema
    assert tool.to_anthropic_tool() == {
        "name": "subagent",
        "description": tool.description,
        "input_schema": schema,
    }


async def test_background_disabled_removes_parameter_and_rejects_forced_true() -> None:
    provider = FakeProvider()
    tool, _ = mount(provider, enable_run_in_background=False)
    assert list(tool.input_schema["properties"]) == ["description", "prompt"]
    assert "run_in_background" not in tool.description
    result = await tool.call({"description": "d", "prompt": "p", "run_in_background": True}, CALLER)
    assert result == ToolResult("run_in_background is disabled for this tool instance", True)
    assert provider.requests == []


def test_numeric_max_depth_without_depth_limit_fails_at_mount() -> None:
    with pytest.raises(MountError) as info:
        mount(FakeProvider(name="p"), max_depth=3)
    assert str(info.value) == (
        'provider "p" cannot enforce max_depth (no depth_limit capability) — set max_depth ='
        ' "provider-managed"'
    )
    tool, _ = mount(FakeProvider(capabilities=Capabilities(depth_limit=True)), max_depth=2)
    assert tool.config.max_depth == 2


def test_mount_errors_carry_their_field() -> None:
    with pytest.raises(MountError) as info:
        mount(FakeProvider(name="p"), max_depth=3)
    assert info.value.field == "max_depth"
    service = SubagentService()
    config = SubagentToolConfig(provider="max_depth", max_depth="provider-managed")
    with pytest.raises(MountError) as info:
        SubagentTool(config, service, JobRegistry())
    assert info.value.field == "provider"
    assert str(info.value) == 'tool "subagent": no subagent provider registered for "max_depth"'


def test_the_delegation_tool_is_built_on_the_shared_base() -> None:
    from dsh.jobs.tools import ToolBase as JobsToolBase
    from dsh.tool_subagent import ToolBase

    assert ToolBase is JobsToolBase
    tool, _ = mount(FakeProvider())
    assert isinstance(tool, ToolBase)
    assert repr(tool) == "<SubagentTool subagent provider='fake'>"


def test_config_rules() -> None:
    with pytest.raises(ValueError, match="background_mode"):
        SubagentToolConfig(provider="p", background_mode="persistent")
    with pytest.raises(ValueError, match="max_depth"):
        SubagentToolConfig(provider="p", max_depth=-1)
    with pytest.raises(ValueError, match="extra"):
        SubagentToolConfig(provider="p", model="x")  # type: ignore[call-arg]


async def test_arguments_are_validated_before_anything_runs() -> None:
    provider = FakeProvider()
    tool, _ = mount(provider)
    bad = await tool.call({"description": "d", "prompt": "p", "model": "x"}, CALLER)
    missing = await tool.call({"description": "d"}, CALLER)
    typed = await tool.call({"description": "d", "prompt": 3}, CALLER)
    assert bad == ToolResult('invalid arguments: unknown field "model"', True)
    assert missing == ToolResult('invalid arguments: missing required field "prompt"', True)
    assert typed == ToolResult('invalid arguments: field "prompt" must be a string', True)
    assert provider.requests == []


async def test_foreground_success_closes_once_and_passes_the_request() -> None:
    provider = CountingProvider()
    tool, _ = mount(provider)
    result = await tool.call({"description": "say hi", "prompt": "hello there"}, CALLER)
    assert result.text == "hello there"
    assert result.is_error is False
    assert list(provider.acloses.values()) == [1]
    request = provider.requests[0]
    assert request.label == "say hi"
    assert request.parent.session_id == "s1"
    assert request.parent.cwd == "/tmp"
    assert request.max_depth is None


FACTS = FailureFacts(
    product="Codex", stage="turn", category="httpConnectionFailed", http_status=503
)


async def test_foreground_failure_text_and_single_close() -> None:
    provider = CountingProvider(failure=FACTS)
    tool, _ = mount(provider)
    result = await tool.call({"description": "d", "prompt": "p"}, CALLER)
    assert result.is_error is True
    assert result.text == (
        "subagent run failed\nDiagnostic: Product subagent failure (product: Codex; stage: turn;"
        " category: httpConnectionFailed; HTTP status: 503)"
    )
    assert result.text == "subagent run failed\nDiagnostic: " + failure_line(FACTS)
    assert list(provider.acloses.values()) == [1]


@pytest.mark.parametrize(
    ("reason", "headline"),
    [
        (StopReason.ERROR, "subagent run failed"),
        (StopReason.MAX_TOKENS, "subagent run hit its token limit before finishing"),
        (StopReason.REFUSAL, "subagent declined the task"),
        ("weird", "subagent run ended abnormally (weird)"),
    ],
)
async def test_headlines_and_partial_output(reason: Any, headline: str) -> None:
    result = SubagentResult(reason, (TextBlock("half"), TextBlock(" done")), "diag")
    tool, _ = mount(FakeProvider(result=result))
    out = await tool.call({"description": "d", "prompt": "p"}, CALLER)
    assert out.is_error is True
    assert (
        out.text == f"{headline}\nDiagnostic: diag\nPartial output before the run ended:\nhalf done"
    )


async def test_foreground_caller_cancellation_closes_once() -> None:
    provider = CountingProvider(delay=None)
    tool, _ = mount(provider)
    task = asyncio.create_task(tool.call({"description": "d", "prompt": "p"}, CALLER))
    await asyncio.wait_for(provider.started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert list(provider.acloses.values()) == [1]
    assert provider.runs[0].closed is True


async def test_start_failure_and_dispose_failure_texts() -> None:
    from dsh.subagent import ProductFailure

    failing = FakeProvider(start_error=ProductFailure.from_facts("subagent-codex", FACTS))
    tool, _ = mount(failing)
    out = await tool.call({"description": "d", "prompt": "p"}, CALLER)
    assert out == ToolResult(f"subagent-codex: {failure_line(FACTS)}", True)

    provider = CountingProvider(failure=FACTS)
    provider.dispose_error = ProductFailure("subagent-codex: teardown failed")
    tool, _ = mount(provider)
    out = await tool.call({"description": "d", "prompt": "p"}, CALLER)
    assert out.text.startswith(
        "subagent run failed; dispose failed: subagent-codex: teardown failed\nDiagnostic: "
    )


async def test_background_completed_reported_after_close() -> None:
    provider = CountingProvider(delay=0.02)
    tool, jobs = mount(provider)
    async with jobs:
        out = await tool.call(
            {"description": "bg task", "prompt": "answer", "run_in_background": True}, CALLER
        )
        job_id = started_id(out)
        snap = await jobs.wait(job_id, 5, CALLER)
        assert snap.status is JobStatus.COMPLETED
        assert snap.label == "bg task"
        assert list(provider.acloses.values()) == [1]  # closed before the job settled
        assert jobs.read(job_id, CALLER) == "answer"


async def test_background_failure_kill_and_owner_close() -> None:
    failing = CountingProvider(failure=FACTS)
    tool, jobs = mount(failing)
    async with jobs:
        out = await tool.call(
            {"description": "d", "prompt": "p", "run_in_background": True}, CALLER
        )
        snap = await jobs.wait(started_id(out), 5, CALLER)
        assert snap.status is JobStatus.FAILED
        assert snap.detail == f"error; diagnostic: {failure_line(FACTS)}"

    slow = CountingProvider(delay=None)
    tool, jobs = mount(slow)
    async with jobs:
        first = started_id(
            await tool.call({"description": "d", "prompt": "p", "run_in_background": True}, CALLER)
        )
        second = started_id(
            await tool.call({"description": "e", "prompt": "p", "run_in_background": True}, CALLER)
        )
        assert first != second
        for _ in range(2):
            slow.started.clear()
            if len(slow.runs) < 2:
                await asyncio.wait_for(slow.started.wait(), 5)
        assert jobs.kill(first, CALLER) == "requested"
        snap = await jobs.wait(first, 5, CALLER)
        assert snap.status is JobStatus.KILLED
        assert jobs.get(second, CALLER).status is JobStatus.RUNNING
        await jobs.close_owner(CALLER)
        assert all(count == 1 for count in slow.acloses.values())
        assert slow.open_runs == ()
        # The owner's close keeps both records, each settled as killed.
        assert jobs.get(first, CALLER).status is JobStatus.KILLED
        assert jobs.get(second, CALLER).status is JobStatus.KILLED


START_LINE = "subagent-codex: " + failure_line(FACTS)
TEARDOWN_LINE = "subagent-codex: " + failure_line(FailureFacts("Codex", "teardown", "unknown"))


def _double_failure() -> ExceptionGroup[Exception]:
    """What a provider raises when its start failed and the rollback failed too."""
    from dsh.subagent import ProductFailure

    members = [ProductFailure(START_LINE), ProductFailure(TEARDOWN_LINE)]
    return ExceptionGroup(f"{START_LINE}; {TEARDOWN_LINE}", members)


async def test_a_start_that_raises_a_group_or_anything_else_gives_a_safe_result() -> None:
    tool, _ = mount(FakeProvider(start_error=_double_failure()))
    out = await tool.call({"description": "d", "prompt": "p"}, CALLER)
    assert out == ToolResult(f"{START_LINE}; {TEARDOWN_LINE}", True)

    tool, _ = mount(FakeProvider(start_error=RuntimeError("raw /home/u/.env SECRET-CANARY")))
    out = await tool.call({"description": "d", "prompt": "p"}, CALLER)
    assert out == ToolResult("RuntimeError", True)


async def test_background_start_failures_show_only_safe_text() -> None:
    for error, detail in (
        (_double_failure(), f"{START_LINE}; {TEARDOWN_LINE}"),
        (RuntimeError("raw /home/u/.env SECRET-CANARY"), "RuntimeError"),
    ):
        tool, jobs = mount(FakeProvider(start_error=error))
        async with jobs:
            out = await tool.call(
                {"description": "d", "prompt": "p", "run_in_background": True}, CALLER
            )
            snap = await jobs.wait(started_id(out), 5, CALLER)
            assert snap.status is JobStatus.FAILED
            assert snap.detail == detail


async def test_a_teardown_failure_after_job_kill_stays_in_the_killed_detail() -> None:
    from dsh.subagent import ProductFailure

    provider = CountingProvider(delay=None)
    provider.dispose_error = ProductFailure(TEARDOWN_LINE)
    tool, jobs = mount(provider)
    async with jobs:
        out = await tool.call(
            {"description": "d", "prompt": "p", "run_in_background": True}, CALLER
        )
        job_id = started_id(out)
        await asyncio.wait_for(provider.started.wait(), 5)
        await asyncio.sleep(0)
        jobs.kill(job_id, CALLER, reason="not needed")
        snap = await jobs.wait(job_id, 5, CALLER)
        assert snap.status_line == (
            f"[status: killed, not needed; dispose failed: {TEARDOWN_LINE}]"
        )


async def test_an_owner_close_during_the_dispose_waits_for_it() -> None:
    provider = CountingProvider(delay=0.01)
    provider.close_delay = 0.5
    tool, jobs = mount(provider)
    async with jobs:
        await tool.call({"description": "d", "prompt": "p", "run_in_background": True}, CALLER)
        await asyncio.wait_for(provider.started.wait(), 5)
        await asyncio.sleep(0.1)  # the run has completed; the work is inside aclose()
        assert list(provider.acloses.values()) == [1]
        await jobs.close_owner(CALLER)
        assert provider.closes_finished == 1, "the owner close cut the run's close short"


async def test_a_cancelled_call_whose_start_fails_still_raises_the_cancellation() -> None:
    from dsh.subagent import ProductFailure

    class RollbackFailing(FakeProvider):
        """Like Codex: a cancelled start whose rollback fails raises the teardown line."""

        async def start(self, request: ResolvedStartRequest) -> Any:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                raise ProductFailure(TEARDOWN_LINE) from None
            raise AssertionError("unreachable")

    tool, jobs = mount(RollbackFailing())
    call = asyncio.create_task(tool.call({"description": "d", "prompt": "p"}, CALLER))
    await asyncio.sleep(0.01)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call

    async with jobs:
        out = await tool.call(
            {"description": "d", "prompt": "p", "run_in_background": True}, CALLER
        )
        job_id = started_id(out)
        await asyncio.sleep(0.01)
        jobs.kill(job_id, CALLER, reason="stop")
        snap = await jobs.wait(job_id, 5, CALLER)
        assert snap.status_line == f"[status: killed, stop; {TEARDOWN_LINE}]"
