"""``CodexRun.aclose()``: every caller, concurrent or cancelled, returns after whole-tree exit.

The stand-in's ``stubborn`` tree ignores SIGTERM and stdin EOF (and so does its child), so only
the ladder's SIGKILL after ``dispose_grace_ms`` ends it: a close that returns early sees it alive.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from dsh.subagent import ProductFailure, StopReason
from dsh.subagent_codex import CodexProvider, CodexProviderConfig
from dsh.subagent_codex._run import CodexRun
from dsh.subagent_codex.testing import make_start_request
from dsh.subprocess import ManagedProcess, TeardownError, marked_processes

STANDIN = Path(__file__).with_name("standin_app_server.py")
GRACE_MS = 600
TEARDOWN_LINE = (
    "subagent-codex: Product subagent failure (product: Codex; stage: teardown; category: unknown)"
)


async def stubborn_run(tmp_path: Path) -> CodexRun:
    config = CodexProviderConfig(
        env={"STANDIN_SCENARIO": "stubborn"}, stderr="discard", dispose_grace_ms=GRACE_MS
    )
    provider = CodexProvider(config, _program=[sys.executable, str(STANDIN)])
    run = await provider.start(make_start_request(tmp_path, "task"))
    # The stand-in forks its child right after the turn/start reply: wait for the whole tree.
    deadline = time.monotonic() + 10
    while len(await asyncio.to_thread(own_tree)) < 2:
        assert time.monotonic() < deadline, "the stand-in's tree never reached two processes"
        await asyncio.sleep(0.02)
    return run


def own_tree() -> list[int]:
    return marked_processes(owner_pid=os.getpid())


async def test_a_second_concurrent_aclose_waits_for_whole_tree_exit(tmp_path: Path) -> None:
    run = await stubborn_run(tmp_path)
    first = asyncio.create_task(run.aclose())
    await asyncio.sleep(0.05)
    started = time.monotonic()
    await run.aclose()
    waited = time.monotonic() - started
    assert await asyncio.to_thread(own_tree) == [], "the second aclose returned with the tree alive"
    assert waited > (GRACE_MS / 1000) / 2
    await first
    assert (await run.result()).stop_reason is StopReason.ABORTED


async def test_a_cancelled_aclose_still_waits_for_proven_exit(tmp_path: Path) -> None:
    run = await stubborn_run(tmp_path)
    closing = asyncio.create_task(run.aclose())
    await asyncio.sleep(0.1)
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    # Exit proven by the ladder, not only the synchronous SIGKILL fallback of a cut-short close.
    assert run._proc.tree_gone
    assert await asyncio.to_thread(own_tree) == []
    await run.aclose()  # later calls return at once


async def test_a_failed_teardown_raises_for_every_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = ManagedProcess.aclose
    calls: list[int] = []

    async def failing_aclose(self: ManagedProcess) -> None:
        calls.append(self.pid)
        await original(self)
        raise TeardownError("simulated")

    run = await stubborn_run(tmp_path)
    monkeypatch.setattr(ManagedProcess, "aclose", failing_aclose)
    outcomes = await asyncio.gather(run.aclose(), run.aclose(), return_exceptions=True)
    later = await asyncio.gather(run.aclose(), return_exceptions=True)
    for outcome in (*outcomes, *later):
        assert isinstance(outcome, ProductFailure)
        assert str(outcome) == TEARDOWN_LINE
        assert isinstance(outcome.__cause__, TeardownError)
    assert len(calls) == 1, "the teardown ran more than once"
    assert await asyncio.to_thread(own_tree) == []
