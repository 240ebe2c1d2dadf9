"""Escape: product-side descendants that leave the session, or ignore SIGTERM, die with aclose().

Each real product is made to run ``escapee.py`` for real (Codex through an ``exec_command``
function call under ``dangerously-bypass-approvals-and-sandbox``; Claude Code through a Bash
``tool_use`` under ``bypassPermissions``). The escapee starts a ``setsid()`` + double-fork daemon
and a SIGTERM-ignoring daemon in its own process group, and returns. The model's next request
stalls, so the run is mid-turn while the test checks the daemons, then ``aclose()`` runs.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

from dsh.subagent import StopReason
from dsh.subagent_codex.testing import FunctionCallItem, Reply, Stall

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(90)]

KINDS = ("setsid", "ignore")
GRACE_S = 1.5


def _command(kit: Any, workspace: Path, nonce: str) -> str:
    return f"{sys.executable} {kit.escapee} {workspace} {nonce} {' '.join(KINDS)}"


def _ignores_sigterm(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    return False


async def _check_escaped_then_close(kit: Any, run: Any, workspace: Path, nonce: str) -> None:
    await kit.wait_until(
        lambda: (
            all((workspace / f"{kind}.ready").exists() for kind in KINDS)
            and len(kit.pids_with(nonce)) == len(KINDS)
        ),
        what="both escapees to be running",
    )
    escaped = await asyncio.to_thread(kit.pids_with, nonce)
    own_session = os.getsid(0)
    sessions = {pid: os.getsid(pid) for pid in escaped}
    groups = {pid: os.getpgid(pid) for pid in escaped}
    assert len(set(groups.values())) == len(KINDS), "each escapee leads its own group"
    assert own_session not in sessions.values()
    ignoring = [pid for pid in escaped if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert ignoring == escaped, f"escapees must be alive before aclose: {escaped}"
    began = time.monotonic()
    await run.aclose()
    took = time.monotonic() - began
    assert await asyncio.to_thread(kit.pids_with, nonce) == [], "an escapee outlived aclose()"
    assert await asyncio.to_thread(kit.own_marked) == []
    # The SIGTERM-ignoring daemon needs the SIGKILL tier, which comes only after the grace
    # (dispose_grace_ms=1500), and then the tree is gone promptly.
    assert GRACE_S * 0.9 <= took < GRACE_S + 5.0, f"aclose() took {took:.2f}s"
    result = await run.result()
    assert result.stop_reason is StopReason.ABORTED


async def test_codex_descendants_escaping_the_session_die_with_aclose(kit: Any, codex: Any) -> None:
    nonce = f"escape-{uuid.uuid4().hex}"
    command = {
        "cmd": _command(kit, codex.workspace, nonce),
        "login": False,
        "yield_time_ms": 10_000,
    }
    codex.server.queue(Reply((FunctionCallItem("exec_command", command),)))
    codex.server.queue(Stall((), seconds=60))
    provider = codex.provider(permission_mode="dangerously-bypass-approvals-and-sandbox")
    run = await provider.start(codex.request("start the daemons"))
    try:
        await codex.server.wait_for_requests(2, timeout=30)
        await _check_escaped_then_close(kit, run, codex.workspace, nonce)
    finally:
        await run.aclose()
    output = [
        i for i in codex.server.requests[1].body["input"] if i["type"] == "function_call_output"
    ]
    assert "Process exited with code 0" in output[-1]["output"]


async def test_claude_code_descendants_escaping_the_session_die_with_aclose(
    kit: Any, claude: Any
) -> None:
    nonce = f"escape-{uuid.uuid4().hex}"
    command = _command(kit, claude.workspace, nonce)
    claude.server.queue_tool_call("Bash", {"command": command, "description": "start daemons"})
    claude.server.queue_stall()
    provider = claude.provider(permission_mode="bypassPermissions", env={"IS_SANDBOX": "1"})
    run = await provider.start(claude.request("start the daemons"))
    try:
        assert await claude.server.wait_for_requests(2, timeout=60)
        assert claude.server.requests[1].answers_tool
        await _check_escaped_then_close(kit, run, claude.workspace, nonce)
    finally:
        await run.aclose()
