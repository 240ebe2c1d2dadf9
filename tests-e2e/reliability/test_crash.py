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
"""

from __future__ import annotations

import asyncio
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
    assert host.stdout is not None
    try:
        async with asyncio.timeout(60):
            line = await host.stdout.readline()
        assert line == b"started\n", host.collected("stderr").text
        await kit.wait_until(mid_turn, what="the run to be mid-turn")
        if nonce is not None:
            await kit.wait_until(lambda: kit.pids_with(nonce) != [], what="the daemon")
        survivors_before = await asyncio.to_thread(kit.owned_by, host.pid)
        assert survivors_before, "the host's run has no marked product process"
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
        assert orphans, "no product process outlived the SIGKILLed host"
        daemons: set[int] = set()
        if nonce is not None:
            daemons = set(await asyncio.to_thread(kit.pids_with, nonce))
            assert daemons, "the setsid daemon died with the host"
            assert daemons <= set(orphans)
        reaped = await kit.reap_in_fresh_process()  # asserts the reaper exited 0
        # Members may still be exiting on their own (Codex after stdin EOF), so the exact sets
        # can differ; the orphans that really stay are reaped, and nothing of the tree remains.
        assert reaped & set(orphans), (orphans, reaped)
        if nonce is not None:
            assert daemons <= reaped, (daemons, reaped)
        assert await asyncio.to_thread(kit.owned_by, host.pid) == []
        if nonce is not None:
            assert await asyncio.to_thread(kit.pids_with, nonce) == []
    finally:
        await host.aclose()


MODES = [pytest.param(True, id="supervised"), pytest.param(False, id="plain")]


@pytest.mark.parametrize("supervised", MODES)
async def test_claude_code_tree_of_a_killed_host_is_reaped(
    kit: Any, claude: Any, tmp_path: Path, supervised: bool
) -> None:
    claude.server.queue_stall()
    host = await _spawn_host(
        kit,
        tmp_path / "host-tmp",
        supervised,
        "claude-code",
        claude.server.base_url,
        str(claude.root),
        str(claude.workspace),
        "t",
    )
    await _crash_and_reap(kit, host, None, lambda: len(claude.server.requests) >= 1, supervised)
    assert len(claude.server.requests) >= 1
    # reap_orphans kills processes only: the dead host's run dir stays until a later provider
    # start sweeps the run dirs of dead owners (its name says whose it is).
    left = list((tmp_path / "host-tmp").iterdir())
    assert [p.name.startswith(f"dsh-claude-{host.pid}-") for p in left] == [True]
    assert sweep_lost_run_dirs(tmp_path / "host-tmp") == [left[0].name]
    assert list((tmp_path / "host-tmp").iterdir()) == []


@pytest.mark.parametrize("supervised", MODES)
async def test_codex_tree_of_a_killed_host_is_reaped(
    kit: Any, codex: Any, tmp_path: Path, supervised: bool
) -> None:
    nonce = f"crash-{uuid.uuid4().hex}"
    command = f"{sys.executable} {kit.escapee} {codex.workspace} {nonce} setsid"
    call = {"cmd": command, "login": False, "yield_time_ms": 10_000}
    codex.server.queue(Reply((FunctionCallItem("exec_command", call),)), Stall((), seconds=60))
    host = await _spawn_host(
        kit,
        tmp_path / "host-tmp",
        supervised,
        "codex",
        codex.server.base_url,
        str(codex.home),
        str(codex.workspace),
        "t",
    )
    await _crash_and_reap(kit, host, nonce, lambda: len(codex.server.requests) >= 2, supervised)
    assert len(codex.server.requests) >= 1
