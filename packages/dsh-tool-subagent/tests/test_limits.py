"""The caller's limits with scripted providers: config rules, the watchdog's rules, the CLI flag.

The real-product proofs (both products, every surface) are in tests-e2e/test_limits_real.py,
tests-e2e/test_mcp_real.py and tests-e2e/ray/test_ray_jobs.py.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import pytest

from dsh.jobs import JobRegistry
from dsh.subagent import ResolvedStartRequest, SubagentService
from dsh.subagent.testing import BareRun, FakeProvider, FakeRun
from dsh.tool_subagent import Caller, Harness, SubagentTool, SubagentToolConfig, ToolResult
from dsh.tool_subagent._cli import main
from dsh.tool_subagent._limits import DEFAULT_STALL_TIMEOUT_S, limit_text
from dsh.tool_subagent.errors import ProfileError

CALLER = Caller(session_id="s1", cwd="/tmp")
ARGS = {"description": "d", "prompt": "p"}


class Talking(FakeProvider):
    """Runs that answer after ``delay`` and, until then, move their stamp every ``every`` s."""

    def __init__(self, *args: Any, every: float | None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.every = every
        self.talkers: list[asyncio.Task[None]] = []

    async def start(self, request: ResolvedStartRequest) -> FakeRun:
        run = await super().start(request)
        if self.every is not None:
            every = self.every

            async def talk() -> None:
                while not run.settled:
                    await asyncio.sleep(every)
                    run._activity.touch()

            self.talkers.append(asyncio.create_task(talk()))
        return run


class Stampless(FakeProvider):
    """A provider whose runs have no ``last_activity`` (written before the stamp)."""

    async def start(self, request: ResolvedStartRequest) -> Any:
        run = await super().start(request)
        return BareRun(run)


def mount(provider: FakeProvider, **limits: Any) -> SubagentTool:
    service = SubagentService()
    service.register(provider)
    config = SubagentToolConfig(provider=provider.name, max_depth="provider-managed", **limits)
    return SubagentTool(config, service, JobRegistry())


# ---- config ---------------------------------------------------------------------------------


def test_defaults() -> None:
    config = SubagentToolConfig(provider="p")
    assert (config.timeout_s, config.stall_timeout_s) == (None, DEFAULT_STALL_TIMEOUT_S)
    assert DEFAULT_STALL_TIMEOUT_S == 900.0


@pytest.mark.parametrize("field", ["timeout_s", "stall_timeout_s"])
@pytest.mark.parametrize("value", [0, -1, -0.5, "5", True, math.inf, math.nan, [1]])
def test_bad_limits_are_rejected_naming_the_field(field: str, value: object) -> None:
    profile = {"provider": [], "tool": [{"provider": "fake", field: value}]}
    with pytest.raises(ProfileError) as info:
        Harness.from_profile(profile)  # fails at validation, before any provider is looked up
    assert info.value.field == f"tool[0].{field}"


def test_good_limits_are_kept() -> None:
    config = SubagentToolConfig(provider="p", timeout_s=30, stall_timeout_s=2.5)
    assert (config.limits.timeout_s, config.limits.stall_timeout_s) == (30, 2.5)


def test_limit_texts_are_fixed() -> None:
    assert limit_text("stall_timeout_s", 900.0) == (
        "subagent run stopped: no product activity for 900 s (stall_timeout_s)"
    )
    assert limit_text("timeout_s", 2.5) == (
        "subagent run stopped: wall-clock limit of 2.5 s reached (timeout_s)"
    )


@pytest.mark.parametrize("value", ["0", "-3", "nan", "inf", "soon"])
def test_dsh_run_rejects_a_bad_stall_timeout(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--stall-timeout", value, "task"]) == 2
    assert "--stall-timeout" in capsys.readouterr().err


def _stopped(why: str, limit: str) -> ToolResult:
    """What the model gets when ``limit`` stopped a run: ``why``, the limit named, an error."""
    return ToolResult(
        text=f"subagent run stopped: {why} ({limit})",
        is_error=True,
        value={"stop_reason": "aborted", "diagnostic": None, "limit": limit},
    )


# ---- the watchdog ---------------------------------------------------------------------------


async def test_a_silent_run_is_stopped_with_the_fixed_text() -> None:
    provider = Talking("fake", delay=None, every=None)
    tool = mount(provider, stall_timeout_s=0.2)
    result = await asyncio.wait_for(tool.call(ARGS, CALLER), 5)
    assert result == _stopped("no product activity for 0.2 s", "stall_timeout_s")
    [run] = provider.runs
    assert run.closed
    assert run.cancel_reasons[0] == result.text


async def test_a_run_that_keeps_talking_is_not_stopped() -> None:
    # Answers after 1 s, talks every 0.05 s: ten times the stall limit of 0.1 s.
    provider = Talking("fake", delay=1.0, every=0.05)
    tool = mount(provider, stall_timeout_s=0.1)
    result = await asyncio.wait_for(tool.call(ARGS, CALLER), 5)
    assert result.is_error is False


async def test_the_wall_clock_stops_a_run_that_keeps_talking() -> None:
    provider = Talking("fake", delay=None, every=0.05)
    tool = mount(provider, timeout_s=0.3, stall_timeout_s=0.1)
    result = await asyncio.wait_for(tool.call(ARGS, CALLER), 5)
    assert result.text == "subagent run stopped: wall-clock limit of 0.3 s reached (timeout_s)"
    assert result.value is not None
    assert result.value["limit"] == "timeout_s"


async def test_an_answer_that_beats_the_limit_is_kept() -> None:
    provider = Talking("fake", delay=0.05, every=None)
    tool = mount(provider, stall_timeout_s=5)
    result = await tool.call(ARGS, CALLER)
    assert result.is_error is False
    assert "limit" not in (result.value or {})


async def test_a_stalled_job_fails_with_the_limit_as_its_detail() -> None:
    provider = Talking("fake", delay=None, every=None)
    tool = mount(provider, stall_timeout_s=0.2)
    started = await tool.call({**ARGS, "run_in_background": True}, CALLER)
    job_id = started.value["job_id"] if started.value else ""
    snapshot = await tool.jobs.wait(job_id, 5.0, CALLER)
    assert snapshot.status_line == (
        "[status: failed, subagent run stopped: no product activity for 0.2 s (stall_timeout_s)]"
    )
    await tool.jobs.aclose()


async def test_a_provider_without_the_stamp_gets_no_stall_limit_and_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tool = mount(Stampless("old-style", delay=0.5), stall_timeout_s=0.1)
    with caplog.at_level(logging.WARNING, logger="dsh.tool_subagent"):
        result = await asyncio.wait_for(tool.call(ARGS, CALLER), 5)
    assert result.is_error is False  # five times the stall limit, and completed
    assert 'subagent provider "old-style" reports no product activity' in caplog.text
    # ... while the wall clock still applies.
    limited = mount(Stampless("old-style-2", delay=None), timeout_s=0.2, stall_timeout_s=0.1)
    result = await asyncio.wait_for(limited.call(ARGS, CALLER), 5)
    assert result.text == "subagent run stopped: wall-clock limit of 0.2 s reached (timeout_s)"


async def test_the_wall_clock_counts_the_start_too() -> None:
    # A start that hangs is cancelled (the provider rolls back) and reported as the limit.
    provider = FakeProvider("slow-start", start_delay=30.0)
    tool = mount(provider, timeout_s=0.2)
    result = await asyncio.wait_for(tool.call(ARGS, CALLER), 5)
    assert result == _stopped("wall-clock limit of 0.2 s reached", "timeout_s")
    assert provider.runs == []  # never published
