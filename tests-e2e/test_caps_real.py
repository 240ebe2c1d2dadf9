"""The caller's spend caps on the REAL products (keyless): a model in an endless tool loop.

The loopback model servers answer every request of a ``LOOP`` task with a tool call and report a
fixed usage per response, so the run's spend grows by a known step per model response and never
ends by itself. ``max_total_tokens`` below what it would reach stops it within one response of
crossing, tree exit first, with the fixed text and the spent figure in the host facts: in the
foreground, as a Job and through ``dsh run``. Claude Code's ``max_cost_usd`` is its own
``--max-budget-usd`` plus dsh's check; the default profile's token cap ends a loop that spends
50 million tokens. ``dsh mcp`` is in test_mcp_real.py, the Ray executor in ray/test_ray_limits.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent_claude_code.testing import Behaviour, FakeMessagesServer
from dsh.subagent_claude_code.testing import RecordedRequest as ClaudeRequest
from dsh.subagent_codex.testing import (
    FakeResponsesServer,
    FunctionCallItem,
    MessageItem,
    Reply,
)
from dsh.subagent_codex.testing import RecordedRequest as CodexRequest
from dsh.tool_subagent import Caller, Harness, ToolResult
from dsh.tool_subagent._cli import main
from dsh.tool_subagent._demo.scenarios import owned_marked_processes

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(240)]

CODEX, CLAUDE = "codex", "claude-code"
TOOLS = {CODEX: "capped_codex", CLAUDE: "capped_claude_code"}
DEFAULT_TOOLS = {CODEX: "default_codex", CLAUDE: "default_claude_code"}
#: Tokens each model response reports: Codex's total, and Claude Code's parts (summed by dsh).
STEP = 1100
CODEX_USAGE = {"input_tokens": 1000, "output_tokens": 100, "total_tokens": STEP}
CLAUDE_USAGE = {"input_tokens": 1000, "output_tokens": 100}
CAP = 5000  # crossed by the 5th response (5,500 tokens)
CAPPED = f"subagent run stopped: {CAP} tokens spent (max_total_tokens)"
#: A Codex response that alone spends a fifth of the default cap (50,000,000 tokens).
HUGE = 10_000_000
#: Claude Code ends a run whose response reports more output than its window (1,000,000).
CLAUDE_HUGE = 900_000
LOOP = "LOOP"
#: How Codex 0.163.0's request to summarise a full context begins.
COMPACTION = "You are performing a CONTEXT CHECKPOINT COMPACTION."


@dataclass
class Stack:
    harness: Harness
    codex: FakeResponsesServer
    claude: FakeMessagesServer
    caller: Caller
    profile: Path
    workspace: Path
    #: Per product, the usage the next responses report (the servers' own attribute).
    huge: dict[str, bool] = field(default_factory=dict)

    async def call(self, name: str, **arguments: Any) -> ToolResult:
        result: ToolResult = await self.harness.tool(name).call(arguments, self.caller)
        return result

    def requests(self, product: str) -> int:
        server = self.codex if product == CODEX else self.claude
        return len(server.requests)

    def spend_huge(self) -> None:
        # Spent on reasoning: out of the context window, so no product compacts or refuses.
        self.codex.usage = {
            "input_tokens": 1000,
            "output_tokens": HUGE - 1000,
            "output_tokens_details": {"reasoning_tokens": HUGE - 1100},
            "total_tokens": HUGE,
        }
        self.claude.usage = {"input_tokens": 1000, "output_tokens": CLAUDE_HUGE - 1000}


def _codex_route(request: CodexRequest) -> Reply | None:
    if (request.task or "").startswith(COMPACTION):
        return Reply((MessageItem("summary: LOOP"),))
    if LOOP in (request.task or ""):
        call = {"cmd": "true", "login": False, "yield_time_ms": 20000}
        return Reply((FunctionCallItem("exec_command", call),))
    return None


def _claude_route(request: ClaudeRequest) -> Behaviour | None:
    if LOOP in (request.task or ""):
        return Behaviour("tool_use", tool_name="Glob", tool_input={"pattern": "*.md"})
    return None


@pytest.fixture
async def stack(loopback: Any) -> AsyncIterator[Stack]:
    (loopback.workspace / "README.md").write_text("caps\n", encoding="utf-8")
    loopback.codex_route, loopback.claude_route = _codex_route, _claude_route
    loopback.codex.usage, loopback.claude.usage = dict(CODEX_USAGE), dict(CLAUDE_USAGE)
    # A huge spend per response makes Claude Code compact its context (a request the loopback
    # model does not script); off. Codex's compaction is answered (_codex_route).
    claude_env = {**loopback.claude_env, "DISABLE_AUTO_COMPACT": "1"}
    tools = []
    for kind in (CODEX, CLAUDE):
        capped = {"tool_name": TOOLS[kind], "max_total_tokens": CAP}
        tools += [
            {"provider": kind, "max_depth": "provider-managed", **capped},
            # every limit at its default
            {"provider": kind, "tool_name": DEFAULT_TOOLS[kind], "max_depth": "provider-managed"},
        ]
    profile = loopback.profile(
        codex={"permission_mode": "dangerously-bypass-approvals-and-sandbox"},
        claude={"env": claude_env},
        tool=tools,
    )
    path = loopback.write(profile)
    async with Harness.from_profile(path) as harness:
        caller = Caller("caps", str(loopback.workspace))
        yield Stack(harness, loopback.codex, loopback.claude, caller, path, loopback.workspace)


async def _owned(pid: int | None = None) -> list[int]:
    return await asyncio.to_thread(owned_marked_processes, pid)


def _spent(usage: dict[str, Any], product: str) -> int:
    if product == CODEX:
        return int(usage["total_tokens"])
    return sum(int(usage.get(key, 0)) for key in ("input_tokens", "output_tokens"))


def _within_one_response(spent: int, cap: int, step: int) -> None:
    crossing = -(-cap // step) * step  # the first multiple of the step at or past the cap
    assert crossing <= spent <= crossing + step, (spent, crossing)


@pytest.mark.parametrize("product", [CODEX, CLAUDE])
async def test_max_total_tokens_stops_a_tool_loop_within_one_response(
    stack: Stack, product: str
) -> None:
    began = time.monotonic()
    result = await stack.call(TOOLS[product], description="loop", prompt=f"{LOOP} fg")
    took = time.monotonic() - began
    assert await _owned() == []  # the tree exited before the call returned
    assert result.is_error
    assert result.text == CAPPED, result.text
    assert result.value == {
        "stop_reason": "aborted",
        "diagnostic": None,
        "limit": "max_total_tokens",
    }
    assert result.meta is not None
    usage = result.meta["usage"]
    spent = _spent(usage, product)
    _within_one_response(spent, CAP, STEP)
    served = stack.requests(product)
    print(f"\n{product}: spent {spent} (cap {CAP}), {served} requests served, {took:.2f} s")
    # The model's requests: the crossing response is the 5th; one more may be in flight.
    assert 5 <= served <= 7, served


@pytest.mark.parametrize("product", [CODEX, CLAUDE])
async def test_a_capped_job_ends_failed_with_the_cap_and_its_spend(
    stack: Stack, product: str
) -> None:
    started = await stack.call(
        TOOLS[product], description="loop job", prompt=f"{LOOP} job", run_in_background=True
    )
    assert started.value is not None
    job_id = str(started.value["job_id"])
    read = await stack.call("job_output", job_id=job_id, wait=True, timeout_ms=120000)
    assert read.text == f"(no new output)\n[status: failed, {CAPPED}]", read.text
    snapshot = stack.harness.jobs.get(job_id, stack.caller)
    assert snapshot.meta is not None
    _within_one_response(_spent(snapshot.meta["usage"], product), CAP, STEP)
    assert await _owned() == []


async def test_dsh_run_max_total_tokens_replaces_the_tools_cap(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # The default tool's cap is 50,000,000: the option sets 3,000 for one run. ``dsh run`` runs
    # in this process, in a thread (the loopback Codex model serves on this loop).
    argv = ["run", "--profile", str(stack.profile), "--cwd", str(stack.workspace)]
    argv += ["--tool", DEFAULT_TOOLS[CODEX], "--max-total-tokens", "3000", "--json", LOOP]
    code = await asyncio.to_thread(main, argv)
    out = capsys.readouterr().out
    assert code == 1, out
    report = json.loads(out)
    assert report["text"] == "subagent run stopped: 3000 tokens spent (max_total_tokens)"
    _within_one_response(report["usage"]["total_tokens"], 3000, STEP)
    assert await _owned() == []


async def test_claude_code_max_cost_usd_stops_a_run_priced_past_it(
    stack: Stack, tmp_path: Path
) -> None:
    # 1,000,000 input tokens per response: the CLI prices each past the 0.5 USD cap.
    stack.claude.usage = {"input_tokens": 1_000_000, "output_tokens": 100}
    tool = stack.harness.tool(TOOLS[CLAUDE])
    tool.config = tool.config.model_copy(  # type: ignore[attr-defined]
        update={"max_cost_usd": 0.5, "max_total_tokens": 50_000_000}
    )
    result = await stack.call(TOOLS[CLAUDE], description="cost", prompt=f"{LOOP} cost")
    assert await _owned() == []
    assert result.text == "subagent run stopped: 0.5 USD spent (max_cost_usd)", result.text
    assert result.value is not None
    assert result.value["limit"] == "max_cost_usd"
    assert result.meta is not None
    cost = result.meta["usage"]["cost_usd"]
    served = stack.requests(CLAUDE)
    print(f"\nclaude-code: cost {cost} USD (cap 0.5), {served} requests served")
    assert cost >= 0.5
    assert served == 1  # the CLI checks between messages: one response passed the cap


@pytest.mark.parametrize("product", [CODEX, CLAUDE])
async def test_the_default_profile_stops_an_endless_tool_loop(stack: Stack, product: str) -> None:
    # Every limit at its default; each response spends 10,000,000 tokens, so the default cap
    # (50,000,000) is reached by the 5th. Before the default cap this ran until killed.
    stack.spend_huge()
    result = await stack.call(DEFAULT_TOOLS[product], description="loop", prompt=f"{LOOP} dflt")
    assert await _owned() == []
    assert result.text == "subagent run stopped: 50000000 tokens spent (max_total_tokens)"
    assert result.meta is not None
    step = HUGE if product == CODEX else CLAUDE_HUGE
    _within_one_response(_spent(result.meta["usage"], product), 50_000_000, step)
