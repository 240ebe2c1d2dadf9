"""Crash: a SIGKILLed host's product tree dies with it, or ``reap_orphans()`` removes it.

The host (``crash_host.py``, spawned through ``dsh.subprocess``) starts a real product run against
a loopback model server owned by this test, which stalls the model request. The test SIGKILLs
the host's process only. Under supervisors (the default on Linux) each supervisor sees the host's
socket close and kills its tree: nothing is left, with no reaper. Without them (the fallback,
``plain``) the tree outlives the host (its marker names the dead host as owner), and
``reap_orphans()`` in a fresh process removes it.

Claude Code keeps running on its own after stdin EOF, so the CLI itself is orphaned. Codex exits
on stdin EOF, so its run first starts a ``setsid()`` daemon through ``exec_command``; that
descendant is the orphan.

Any other dsh process on the machine also reaps dead owners' trees when it starts, so in the
``plain`` mode the orphans can be gone before this test's reaper runs: that attempt raises
``ReapedElsewhere`` and the scenario runs again with a new host (``until_not_reaped_elsewhere``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent_claude_code._run_dirs import sweep_lost_run_dirs
from dsh.subagent_codex.testing import FunctionCallItem, Reply, Stall
from dsh.subprocess import Collect, ManagedProcess, SpawnSpec

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(120)]


async def _spawn_host(kit: Any, tmp: Path, supervised: bool, *args: str) -> ManagedProcess:
    # The host's own temporary directory is private: a SIGKILLed host cannot remove the
    # private tmp of its Claude Code run, and that leftover must not land in the shared /tmp.
    await asyncio.to_thread(tmp.mkdir)
    plain = () if supervised else ("plain",)
    spec = SpawnSpec(
        argv=[sys.executable, str(kit.here / "crash_host.py"), *args, *plain],
        env={"TMPDIR": str(tmp)},
        stdout="pipe",
        stderr=Collect(16_384),
        grace_ms=1000,
    )
    host: ManagedProcess = await kit.spawn_host(spec, supervised=supervised)
    return host


async def _crash_and_reap(
    kit: Any,
    host: ManagedProcess,
    nonce: str | None,
    mid_turn: Callable[[], bool],
    supervised: bool,
) -> None:
    try:
        async with contextlib.AsyncExitStack() as stack:
            await _crash_and_check(kit, host, nonce, mid_turn, supervised, stack)
    finally:
        await host.aclose()


async def _crash_and_check(
    kit: Any,
    host: ManagedProcess,
    nonce: str | None,
    mid_turn: Callable[[], bool],
    supervised: bool,
    stack: contextlib.AsyncExitStack,
) -> None:
    assert host.stdout is not None
    async with asyncio.timeout(60):
        line = await host.stdout.readline()
    assert line == b"started\n", host.collected("stderr").text
    await kit.wait_until(mid_turn, what="the run to be mid-turn")
    if nonce is not None:
        await kit.wait_until(lambda: kit.pids_with(nonce) != [], what="the daemon")
    survivors_before = await asyncio.to_thread(kit.owned_by, host.pid)
    assert survivors_before, "the host's run has no marked product process"
    reap = None if supervised else await stack.enter_async_context(kit.fresh_reaper())
    os.kill(host.pid, signal.SIGKILL)
    outcome = await host.wait()
    assert outcome.signal == "SIGKILL"
    if supervised:
        await kit.wait_until(
            lambda: kit.owned_by(host.pid) == [], 5.0, "the tree to die with its host"
        )
        if nonce is not None:
            assert await asyncio.to_thread(kit.pids_with, nonce) == []
        return
    await asyncio.sleep(0.5)  # let whatever dies with the host die
    orphans = await asyncio.to_thread(kit.owned_by, host.pid)
    if not orphans:
        raise kit.ReapedElsewhere  # or they died with the host: a few attempts tell
    daemons: set[int] = set()
    if nonce is not None:
        daemons = set(await asyncio.to_thread(kit.pids_with, nonce))
        if not daemons:
            raise kit.ReapedElsewhere
        assert daemons <= set(orphans)
    assert reap is not None
    reaped = await reap()  # asserts the reaper exited 0
    missed = not (reaped & set(orphans)) or not daemons <= reaped
    if missed and await asyncio.to_thread(kit.owned_by, host.pid) == []:
        raise kit.ReapedElsewhere  # taken between the scan above and this reaper's
    # Members may still be exiting on their own (Codex after stdin EOF), so the exact sets
    # can differ; the orphans that really stay are reaped, and nothing of the tree remains.
    assert reaped & set(orphans), (orphans, reaped)
    if nonce is not None:
        assert daemons <= reaped, (daemons, reaped)
    assert await asyncio.to_thread(kit.owned_by, host.pid) == []
    if nonce is not None:
        assert await asyncio.to_thread(kit.pids_with, nonce) == []


async def test_claude_code_tree_of_a_killed_host_is_reaped(
    kit: Any, claude: Any, tmp_path: Path, supervised: bool
) -> None:
    async def attempt(n: int) -> None:
        claude.server.queue_stall()
        seen = len(claude.server.requests)
        host_tmp = tmp_path / f"host-tmp-{n}"
        host = await _spawn_host(
            kit,
            host_tmp,
            supervised,
            "claude-code",
            claude.server.base_url,
            str(claude.root),
            str(claude.workspace),
            "t",
        )
        await _crash_and_reap(
            kit, host, None, lambda: len(claude.server.requests) > seen, supervised
        )
        left = list(host_tmp.iterdir())
        if supervised:
            # The run dir is the spawn's owned dir: the supervisor removed it once the tree
            # it killed was gone, with no provider start needed.
            assert left == []
            return
        # reap_orphans kills processes only: the dead host's run dir stays until a later
        # provider start sweeps the run dirs of dead owners (its name says whose it is).
        assert [p.name.startswith(f"dsh-claude-{host.pid}-") for p in left] == [True]
        assert sweep_lost_run_dirs(host_tmp) == [left[0].name]
        assert list(host_tmp.iterdir()) == []

    await kit.until_not_reaped_elsewhere(attempt)


async def test_codex_tree_of_a_killed_host_is_reaped(
    kit: Any, codex: Any, tmp_path: Path, supervised: bool
) -> None:
    async def attempt(n: int) -> None:
        nonce = f"crash-{uuid.uuid4().hex}"
        command = f"{sys.executable} {kit.escapee} {codex.workspace} {nonce} setsid"
        call = {"cmd": command, "login": False, "yield_time_ms": 10_000}
        codex.server.queue(Reply((FunctionCallItem("exec_command", call),)), Stall((), seconds=60))
        seen = len(codex.server.requests)
        host = await _spawn_host(
            kit,
            tmp_path / f"host-tmp-{n}",
            supervised,
            "codex",
            codex.server.base_url,
            str(codex.home),
            str(codex.workspace),
            "t",
        )
        await _crash_and_reap(
            kit, host, nonce, lambda: len(codex.server.requests) >= seen + 2, supervised
        )

    await kit.until_not_reaped_elsewhere(attempt)
