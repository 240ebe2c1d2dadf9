"""``ClaudeCodeRun.aclose()``: every caller, concurrent or cancelled, returns after whole-tree exit.

The stand-in's ``stubborn`` tree ignores SIGTERM and stdin EOF (and so does its child), so only
the ladder's SIGKILL after ``dispose_grace_ms`` ends it: a close that returns early sees it alive.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent import ProductFailure, StopReason
from dsh.subagent_claude_code import ClaudeCodeProviderConfig
from dsh.subagent_claude_code._run import ClaudeCodeRun
from dsh.subagent_claude_code.testing import provider_with_cli
from dsh.subprocess import ManagedProcess, SpawnSpec, SubprocessRuntime, TeardownError

SCRIPT = Path(__file__).parent / "stand_ins" / "scripted_cli.py"
GRACE_MS = 600
TEARDOWN_LINE = (
    "subagent-claude-code: Product subagent failure (product: Claude Code; stage: teardown; "
    "category: unknown)"
)


class _CountingFailingRuntime(SubprocessRuntime):
    """Fault injection: the tree really exits, then aclose() reports a teardown failure."""

    def __init__(self) -> None:
        super().__init__()
        self.closes = 0

    async def spawn(self, spec: SpawnSpec) -> ManagedProcess:
        process = await super().spawn(spec)
        real_aclose = process.aclose

        async def failing_aclose() -> None:
            self.closes += 1
            await real_aclose()
            raise TeardownError("injected")

        process.aclose = failing_aclose  # type: ignore[method-assign]
        return process


def failing_teardown_provider(tmp_path: Path, scenario: str) -> tuple[Any, _CountingFailingRuntime]:
    env = {"STANDIN_SCENARIO": scenario, "STANDIN_LOG": str(tmp_path / "log.jsonl")}
    config = ClaudeCodeProviderConfig(env=env, dispose_grace_ms=GRACE_MS, stderr="discard")
    runtime = _CountingFailingRuntime()
    return provider_with_cli(config, [sys.executable, str(SCRIPT)], runtime=runtime), runtime


async def stubborn_run(
    tmp_path: Path,
    make_request: Any,
    own_marked: Callable[[], list[int]],
    runtime: SubprocessRuntime | None = None,
) -> ClaudeCodeRun:
    env = {"STANDIN_SCENARIO": "stubborn", "STANDIN_LOG": str(tmp_path / "log.jsonl")}
    config = ClaudeCodeProviderConfig(env=env, dispose_grace_ms=GRACE_MS, stderr="discard")
    provider = provider_with_cli(config, [sys.executable, str(SCRIPT)], runtime=runtime)
    run = await provider.start(make_request("task", tmp_path))
    deadline = time.monotonic() + 10
    while len(await asyncio.to_thread(own_marked)) < 2:
        assert time.monotonic() < deadline, "the stand-in's tree never reached two processes"
        await asyncio.sleep(0.02)
    return run


async def _closing(
    tmp_path: Path, make_request: Any, own_marked: Callable[[], list[int]]
) -> tuple[ClaudeCodeRun, asyncio.Task[None]]:
    """A stubborn run, and its first ``aclose()`` under way for a moment."""
    run = await stubborn_run(tmp_path, make_request, own_marked)
    first = asyncio.create_task(run.aclose())
    await asyncio.sleep(0.05)
    return run, first


async def test_a_second_concurrent_aclose_waits_for_whole_tree_exit(
    tmp_path: Path, make_request: Any, own_marked_processes: Callable[[], list[int]]
) -> None:
    run, first = await _closing(tmp_path, make_request, own_marked_processes)
    await run.aclose()
    assert await asyncio.to_thread(own_marked_processes) == []
    await first
    assert (await run.result()).stop_reason is StopReason.ABORTED


async def test_a_cancelled_aclose_still_waits_for_proven_exit(
    tmp_path: Path, make_request: Any, own_marked_processes: Callable[[], list[int]]
) -> None:
    runtime = SubprocessRuntime()
    run = await stubborn_run(tmp_path, make_request, own_marked_processes, runtime)
    closing = asyncio.create_task(run.aclose())
    await asyncio.sleep(0.1)
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    # Exit proven by the ladder (the runtime tracks a tree until it is observed gone), not only
    # the synchronous SIGKILL fallback of a cut-short close.
    assert runtime.live == ()
    assert await asyncio.to_thread(own_marked_processes) == []
    await run.aclose()


async def test_a_cancelled_second_aclose_still_waits_for_whole_tree_exit(
    tmp_path: Path, make_request: Any, own_marked_processes: Callable[[], list[int]]
) -> None:
    run, first = await _closing(tmp_path, make_request, own_marked_processes)
    second = asyncio.create_task(run.aclose())
    await asyncio.sleep(0.05)
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    assert await asyncio.to_thread(own_marked_processes) == [], "returned with the tree alive"
    await first


async def test_a_failed_teardown_raises_for_every_caller(
    tmp_path: Path, make_request: Any, own_marked_processes: Callable[[], list[int]]
) -> None:
    runtime = _CountingFailingRuntime()
    run = await stubborn_run(tmp_path, make_request, own_marked_processes, runtime)
    outcomes = await asyncio.gather(run.aclose(), run.aclose(), return_exceptions=True)
    later = await asyncio.gather(run.aclose(), return_exceptions=True)
    for outcome in (*outcomes, *later):
        assert isinstance(outcome, ProductFailure), outcome
        assert str(outcome) == TEARDOWN_LINE
    assert await asyncio.to_thread(own_marked_processes) == []


async def test_a_teardown_failure_after_a_success_result_keeps_the_result(
    tmp_path: Path, make_request: Any
) -> None:
    # The SDK closes the transport itself once its query ends; a teardown failure there must not
    # turn the success into a failed query. It is reported by aclose(), like any teardown failure.
    provider, runtime = failing_teardown_provider(tmp_path, "late-results")
    run = await provider.start(make_request("task", tmp_path))
    result = await asyncio.wait_for(run.result(), 20)
    with pytest.raises(ProductFailure) as caught:
        await run.aclose()
    assert str(caught.value) == TEARDOWN_LINE
    assert result.stop_reason is StopReason.COMPLETED, result
    assert result.text == "FIRST-SUCCESS"
    assert runtime.closes == 1


async def test_a_cancelled_start_whose_rollback_fails_raises_the_teardown_line(
    tmp_path: Path, make_request: Any
) -> None:
    provider, runtime = failing_teardown_provider(tmp_path, "slow-start")
    start = asyncio.create_task(provider.start(make_request("task", tmp_path)))
    deadline = time.monotonic() + 10
    while not runtime.live:
        assert time.monotonic() < deadline, "the stand-in was never spawned"
        await asyncio.sleep(0.02)
    start.cancel()
    with pytest.raises(ProductFailure) as caught:
        await start
    assert str(caught.value) == TEARDOWN_LINE
    assert runtime.live == ()
