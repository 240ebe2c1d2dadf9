"""The caller's limits (``stall_timeout_s``, ``timeout_s``) on the REAL products (keyless).

A harness is built from a profile whose providers point at the loopback model servers. A model
that stalls forever is stopped by ``stall_timeout_s = 2`` in the foreground, as a Job and through
``dsh run --stall-timeout``: settled within the limit plus the dispose grace, with the fixed text,
and no process of the run left (a /proc walk for the tree marker). A model that streams one word
a second for 6 s under the same limit completes: every delta moves the activity stamp.
``dsh mcp`` with a real host is in test_mcp_real.py, the Ray executor in ray/test_ray_jobs.py.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent_codex.testing import (
    FunctionCallItem,
    Reply,
)
from dsh.subprocess.testing import run_to_exit
from dsh.tool_subagent import Caller, ToolResult
from dsh.tool_subagent._demo.scenarios import owned_marked_processes

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(180)]

CODEX, CLAUDE = "codex", "claude-code"
TOOLS = {CODEX: "subagent_codex", CLAUDE: "subagent_claude_code"}
STALL_S = 2
GRACE_S = 2.0
#: Scheduling slack on a shared 2-core machine, on top of the limit and the dispose grace.
SLACK_S = 1.5
STALLED = "subagent run stopped: no product activity for 2 s (stall_timeout_s)"
WORDS = [f"tick{i} " for i in range(7)]  # 7 words, 1 s apart: 6 s of streaming


def _stall(stack: Any, product: str) -> None:
    # Bounded, so the same test against code without the limit ends (and fails) in time.
    stack.stall(product, seconds=40)


def _trickle(stack: Any, product: str) -> None:
    if product == CODEX:
        stack.codex.queue_trickle(WORDS, interval_s=1.0)
    else:
        stack.claude.queue_trickle("".join(WORDS).strip(), interval_s=1.0)


@pytest.fixture
async def stack(loopback: Any) -> AsyncIterator[Any]:
    tool = {"max_depth": "provider-managed", "stall_timeout_s": STALL_S}
    profile = loopback.profile(
        {"stderr": "discard", "dispose_grace_ms": int(GRACE_S * 1000)},
        tool=[{"provider": kind, "tool_name": TOOLS[kind], **tool} for kind in (CODEX, CLAUDE)],
    )
    caller = Caller("limits", str(loopback.workspace))
    async with loopback.session(loopback.write(profile), caller) as session:
        yield session


async def _owned(pid: int | None = None) -> list[int]:
    return await asyncio.to_thread(owned_marked_processes, pid)


async def _stalled_call(stack: Any, product: str, **extra: Any) -> tuple[ToolResult, float]:
    """The call, how long it took from the model request to its settling; the tree was alive
    when the request arrived."""
    _stall(stack, product)
    call = asyncio.ensure_future(
        stack.call(TOOLS[product], description="stall task", prompt="STALL please", **extra)
    )
    arrived = await stack.request_arrived(product, timeout=60)
    assert await _owned() != [], "the product's tree was not alive while the model stalled"
    result = await call
    return result, time.monotonic() - arrived


@pytest.mark.parametrize("product", [CODEX, CLAUDE])
async def test_a_stalled_foreground_run_stops_at_its_stall_limit(stack: Any, product: str) -> None:
    began = time.monotonic()
    result, after_request = await _stalled_call(stack, product)
    assert time.monotonic() - began >= STALL_S
    assert after_request <= STALL_S + GRACE_S + SLACK_S, after_request
    assert result == ToolResult(
        text=STALLED,
        is_error=True,
        value={"stop_reason": "aborted", "diagnostic": None, "limit": "stall_timeout_s"},
    )
    assert await _owned() == []  # the tree exited before the call returned


@pytest.mark.parametrize("product", [CODEX, CLAUDE])
async def test_a_stalled_job_ends_failed_with_the_limit(stack: Any, product: str) -> None:
    _stall(stack, product)
    started = await stack.call(
        TOOLS[product], description="stall job", prompt="STALL job", run_in_background=True
    )
    assert re.fullmatch(r"started background subagent job subagent-[0-9a-f]{12}", started.text)
    assert started.value is not None
    job_id = started.value["job_id"]
    assert started.text == f"started background subagent job {job_id}"
    arrived = await stack.request_arrived(product, timeout=60)
    assert await _owned() != [], "the product's tree was not alive while the model stalled"
    read = await stack.call("job_output", job_id=job_id, wait=True, timeout_ms=60000)
    after_request = time.monotonic() - arrived
    assert after_request <= STALL_S + GRACE_S + SLACK_S, after_request
    assert read.text == f"(no new output)\n[status: failed, {STALLED}]", read.text
    assert await _owned() == []


@pytest.mark.parametrize("product", [CODEX, CLAUDE])
async def test_a_model_streaming_a_word_a_second_completes_under_the_stall_limit(
    stack: Any, product: str
) -> None:
    _trickle(stack, product)
    began = time.monotonic()
    result = await stack.call(TOOLS[product], description="slow task", prompt="TRICKLE please")
    assert time.monotonic() - began >= 6.0  # the stream really took longer than the limit
    assert result == ToolResult(
        text="".join(WORDS).strip() if product == CLAUDE else "".join(WORDS),
        is_error=False,
        value={"stop_reason": "completed", "diagnostic": None},
    )
    assert await _owned() == []


async def test_timeout_s_stops_a_run_that_keeps_talking(stack: Any) -> None:
    # The wall clock bounds a live run the stall limit lets through.
    tool = stack.harness.tool(TOOLS[CODEX])
    tool.config = tool.config.model_copy(update={"timeout_s": 3.0})
    _trickle(stack, CODEX)
    began = time.monotonic()
    result = await stack.call(TOOLS[CODEX], description="slow task", prompt="TRICKLE long")
    took = time.monotonic() - began
    assert 3.0 <= took <= 3.0 + GRACE_S + SLACK_S, took
    assert result.is_error
    assert result.text.startswith(
        "subagent run stopped: wall-clock limit of 3 s reached (timeout_s)"
    ), result.text
    assert result.value is not None
    assert result.value["limit"] == "timeout_s"
    assert await _owned() == []


async def _dsh_run(stack: Any, *args: str) -> tuple[int | None, str, str, int]:
    argv = [sys.executable, "-m", "dsh.tool_subagent._cli", "run", "--profile", str(stack.profile)]
    argv += ["--cwd", str(stack.workspace), *args]
    ran = await run_to_exit(argv, cwd=stack.workspace, timeout_s=90)
    return ran.exit_code, ran.stdout, ran.stderr, ran.pid


@pytest.mark.parametrize("product", [CODEX, CLAUDE])
async def test_dsh_run_stall_timeout_stops_a_stalled_run(stack: Any, product: str) -> None:
    # The profile says 2 s already; --stall-timeout 2.5 replaces it and is the one named.
    _stall(stack, product)
    began = time.monotonic()
    run = asyncio.ensure_future(
        _dsh_run(stack, "--tool", TOOLS[product], "--stall-timeout", "2.5", "STALL cli")
    )
    arrived = await stack.request_arrived(product, timeout=60)
    code, out, err, pid = await run
    assert time.monotonic() - began >= 2.5
    assert time.monotonic() - arrived <= 2.5 + GRACE_S + SLACK_S + 1.0  # + interpreter exit
    assert (code, out) == (1, "")
    assert err == "subagent run stopped: no product activity for 2.5 s (stall_timeout_s)\n"
    assert await _owned(pid) == []


def _command(cmd: str) -> Reply:
    call = {"cmd": cmd, "login": False, "yield_time_ms": 20000}
    return Reply((FunctionCallItem("exec_command", call),))


async def test_a_codex_command_that_prints_keeps_its_run_alive_and_a_silent_one_does_not(
    stack: Any,
) -> None:
    # Codex streams a running command's output (item/commandExecution/outputDelta): a command
    # that prints once a second for 6 s is activity; the same 6 s of silence is a stall.
    stack.codex.queue(_command("for i in 1 2 3 4 5 6; do echo tick $i; sleep 1; done"))
    stack.codex.queue_text("the command finished")
    began = time.monotonic()
    printed = await stack.call(TOOLS[CODEX], description="printing", prompt="PRINT please")
    assert time.monotonic() - began >= 6.0
    assert (printed.text, printed.is_error) == ("the command finished", False)
    stack.codex.queue(_command("sleep 6"))
    silent = await stack.call(TOOLS[CODEX], description="silent", prompt="SILENT please")
    assert (silent.text, silent.is_error) == (STALLED, True)
    assert await _owned() == []


async def test_a_claude_code_bash_command_is_silent_to_dsh_even_when_it_prints(
    loopback: Any,
) -> None:
    # The CLI streams nothing while its Bash tool runs, whatever the command prints: that is why
    # the default stall limit (900 s) is above the Bash tool's 10-minute maximum.
    claude = loopback.claude
    config = {**loopback.unattended()["claude"], "stderr": "discard", "dispose_grace_ms": 2000}
    profile = {
        "provider": [{"kind": CLAUDE, "config": config}],
        "tool": [{"provider": CLAUDE, "tool_name": "bash_tool", "stall_timeout_s": STALL_S}],
    }
    token = f"{time.monotonic_ns() % 10**6}"
    command = f"for i in 1 2 3 4 5 6 7 8 9 10; do echo tick {token} $i; sleep 1; done"
    claude.queue_tool_call("Bash", {"command": command, "description": "print"})
    claude.queue_text("the command finished")
    async with loopback.session(profile, Caller("l", str(loopback.workspace))) as session:
        call = asyncio.ensure_future(
            session.call("bash_tool", description="bash", prompt="BASH please")
        )
        async with asyncio.timeout(60):
            while not await asyncio.to_thread(_running, token):  # noqa: ASYNC110 - bounded poll
                await asyncio.sleep(0.05)
        result = await call
    assert (result.text, result.is_error) == (STALLED, True)
    assert [r.answers_tool for r in claude.requests] == [False]  # stopped mid-command
    assert not await asyncio.to_thread(_running, token)
    assert await _owned() == []


def _running(token: str) -> bool:
    """Whether a process whose command line holds ``token`` is alive (own walk of /proc)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if token.encode() in (entry / "cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False
