"""Keyless real-product tests: the bundled Claude Code CLI against our loopback Messages server."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from dsh.subagent import Descriptor, Parent, ResolvedStartRequest, StopReason, TextBlock
from dsh.subagent.testing import result_of
from dsh.subagent_claude_code import ClaudeCodeRun
from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subprocess import SpawnSpec, SubprocessRuntime, marked_processes, reap_orphans_once

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(120)]

ANSWER = "FAKE-ANSWER  “byte-exact” ✓\n  trailing spaces  "
FAILURE = "Product subagent failure (product: Claude Code; stage: {stage}; category: {category}"


def _tree_id(run: ClaudeCodeRun) -> str:
    process = run._transport.process
    assert process is not None
    return process.tree_id


async def test_task_key_model_and_answer(
    server: FakeMessagesServer, make_provider: Any, make_request: Any, workspace: Path
) -> None:
    provider = make_provider(model="claude-sonnet-5-5", env={"ANTHROPIC_API_KEY": "sk-ant-k1"})
    server.queue_text(ANSWER)
    task = "Reply with the magic word TASK-7f3a, nothing else."
    run = await provider.start(make_request(task, workspace))
    result = await run.result()
    await run.aclose()
    assert result.stop_reason == StopReason.COMPLETED
    assert result.text == ANSWER
    assert result.diagnostic is None
    [req] = server.requests
    assert req.task == task
    assert req.headers["x-api-key"] == "sk-ant-k1"
    assert req.model == "claude-sonnet-5-5"
    assert req.query == "beta=true"
    assert not any(workspace.iterdir())  # noqa: ASYNC240


async def test_a_prompt_of_two_blocks_reaches_the_model_as_two_text_blocks(
    server: FakeMessagesServer, make_provider: Any, workspace: Path
) -> None:
    # The one rule for several blocks (as Codex's input items): one user message, one text
    # block per prompt block, in order, nothing added between them.
    request = ResolvedStartRequest(
        prompt=(TextBlock("say hi "), TextBlock("please")),
        parent=Parent(session_id="s", cwd=str(workspace)),
        descriptor=Descriptor(provider="claude-code"),
    )
    server.queue_text(ANSWER)
    run = await make_provider().start(request)
    result = await run.result()
    await run.aclose()
    assert result.stop_reason == StopReason.COMPLETED
    [req] = server.requests
    [first_user] = [m for m in (req.body or {})["messages"] if m.get("role") == "user"][:1]
    texts = [b["text"] for b in first_user["content"] if b.get("type") == "text"]
    assert texts[-2:] == ["say hi ", "please"]
    assert req.task == "please"


async def test_two_named_instances_concurrently(
    server: FakeMessagesServer, make_provider: Any, make_request: Any, workspace: Path
) -> None:
    alpha = make_provider(
        provider_name="alpha", model="claude-haiku-5-5", env={"ANTHROPIC_API_KEY": "sk-alpha"}
    )
    beta = make_provider(
        provider_name="beta", model="claude-opus-5-5", env={"ANTHROPIC_API_KEY": "sk-beta"}
    )
    assert (alpha.name, beta.name) == ("alpha", "beta")
    server.queue_text("from alpha", match="TASK-ALPHA")
    server.queue_text("from beta", match="TASK-BETA")
    runs = await asyncio.gather(
        alpha.start(make_request("TASK-ALPHA", workspace, "alpha")),
        beta.start(make_request("TASK-BETA", workspace, "beta")),
    )
    results = await asyncio.gather(*(run.result() for run in runs))
    await asyncio.gather(*(run.aclose() for run in runs))
    assert [r.text for r in results] == ["from alpha", "from beta"]
    seen = {(r.task, r.model, r.headers["x-api-key"]) for r in server.requests}
    assert seen == {
        ("TASK-ALPHA", "claude-haiku-5-5", "sk-alpha"),
        ("TASK-BETA", "claude-opus-5-5", "sk-beta"),
    }


AFTER_THE_DENIAL = (
    "Product subagent failure (product: Claude Code; stage: query-run; category: server; "
    "HTTP status: 500; exit code: 1)\n"
)


async def _denied(server: FakeMessagesServer, provider: Any, request: Any) -> str:
    """Run the scripted tool call, then a model error: the run failed with no output; its
    diagnostic."""
    server.queue_http_error(500, "after the denial")
    result = await result_of(provider, request)
    assert result.stop_reason == StopReason.ERROR
    assert result.output == ()
    assert result.diagnostic is not None
    return result.diagnostic


async def test_dont_ask_denies_write_with_two_line_diagnostic(
    server: FakeMessagesServer, make_provider: Any, make_request: Any, workspace: Path
) -> None:
    provider = make_provider()  # permission_mode defaults to dontAsk
    target = workspace / "denied.txt"
    server.queue_tool_call("Write", {"file_path": str(target), "content": "nope"})
    diagnostic = await _denied(server, provider, make_request("write a file", workspace))
    assert not target.exists()
    assert diagnostic == AFTER_THE_DENIAL + (
        "Claude Code unattended decision (mode: dontAsk; request: tool permission; "
        "decision: denied): Claude Code denied the request before an interactive prompt"
    )
    assert server.requests[1].answers_tool


async def test_can_use_tool_denies_with_fixed_message_and_fact(
    server: FakeMessagesServer, make_provider: Any, make_request: Any, workspace: Path
) -> None:
    # acceptEdits auto-allows file edits and plain filesystem commands such as ``touch`` in the
    # workspace (seen by experiment), but a Python one-liner still asks: the CLI sends the
    # stdio permission prompt, so our ``can_use_tool`` callback answers it.
    provider = make_provider(permission_mode="acceptEdits")
    target = workspace / "asked.txt"
    command = f"python3 -c \"open('{target}', 'w').write('nope')\""
    server.queue_tool_call("Bash", {"command": command, "description": "write a file"})
    diagnostic = await _denied(server, provider, make_request("run a command", workspace))
    assert not target.exists()
    assert diagnostic == AFTER_THE_DENIAL + (
        "Claude Code unattended decision (mode: acceptEdits; request: tool permission; "
        "decision: denied): the provider does not request human approval"
    )
    assert len(server.requests) == 2
    first, second = server.requests
    assert first.task == "run a command"
    assert second.answers_tool
    [tool_use] = [
        block
        for message in (second.body or {})["messages"]
        if message.get("role") == "assistant" and isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_use"
    ]
    assert tool_use["name"] == "Bash"
    [tool_result] = [
        block
        for block in (second.body or {})["messages"][-1]["content"]
        if block.get("type") == "tool_result"
    ]
    assert tool_result["tool_use_id"] == tool_use["id"]
    assert tool_result["is_error"] is True
    content = tool_result["content"]
    if isinstance(content, list):  # the CLI may send the text as blocks
        content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
    assert content == "This unattended Claude Code subagent cannot request human approval."


@pytest.mark.parametrize(
    ("mode", "extra", "written"),
    [
        ("acceptEdits", {}, True),
        ("bypassPermissions", {"IS_SANDBOX": "1"}, True),
        ("plan", {}, False),
    ],
)
async def test_modes_write_or_plan(
    server: FakeMessagesServer,
    make_provider: Any,
    make_request: Any,
    workspace: Path,
    mode: str,
    extra: dict[str, str],
    written: bool,
) -> None:
    provider = make_provider(permission_mode=mode, env=extra)
    target = workspace / "out.txt"
    server.queue_tool_call("Write", {"file_path": str(target), "content": "written"})
    answer = "done" if written else "PLAN: 1. create out.txt with 'written'"
    server.queue_text(answer)
    run = await provider.start(make_request("create out.txt", workspace))
    result = await run.result()
    await run.aclose()
    assert result.stop_reason == StopReason.COMPLETED, result.diagnostic
    assert result.text == answer
    assert target.exists() is written
    if written:
        assert target.read_text() == "written"
    tool_names = {t.get("name") for t in (server.requests[0].body or {}).get("tools", [])}
    assert "AskUserQuestion" not in tool_names
    if mode == "plan":
        assert "ExitPlanMode" not in tool_names


async def test_root_bypass_refusal_is_a_safe_start_failure(
    make_provider: Any, make_request: Any, workspace: Path
) -> None:
    from dsh.subagent import ProductFailure

    assert os.geteuid() == 0, "the refusal only happens as root"
    provider = make_provider(permission_mode="bypassPermissions", stderr="discard")
    with pytest.raises(ProductFailure) as caught:
        await provider.start(make_request("anything", workspace))
    assert str(caught.value) == (
        "subagent-claude-code: Product subagent failure (product: Claude Code; "
        "stage: query-start; category: process-exit; exit code: 1)"
    )


@pytest.mark.parametrize(
    ("status", "category"), [(401, "authentication"), (429, "rate-limit"), (529, "server")]
)
async def test_http_failures_map_to_categories(
    server: FakeMessagesServer,
    make_provider: Any,
    make_request: Any,
    workspace: Path,
    status: int,
    category: str,
) -> None:
    provider = make_provider()
    server.queue_http_error(status, f"fake {status} body")
    began = time.monotonic()
    run = await provider.start(make_request("anything", workspace))
    result = await run.result()
    await run.aclose()
    assert time.monotonic() - began < 30
    assert result.stop_reason == StopReason.ERROR
    assert result.output == ()
    assert result.diagnostic == (
        FAILURE.format(stage="query-run", category=category)
        + f"; HTTP status: {status}; exit code: 1)"
    )
    assert len(server.requests) == 1  # CLAUDE_CODE_MAX_RETRIES=0


async def test_turn_limit(
    server: FakeMessagesServer, make_provider: Any, make_request: Any, workspace: Path
) -> None:
    provider = make_provider(permission_mode="acceptEdits", env={"CLAUDE_CODE_MAX_TURNS": "1"})
    server.queue_tool_call("Write", {"file_path": str(workspace / "t.txt"), "content": "x"})
    server.queue_text("never reached")
    run = await provider.start(make_request("loop", workspace))
    result = await run.result()
    await run.aclose()
    # The CLI exits 1 after an error result, and that observed exit is kept as a fact.
    assert result.diagnostic == (
        FAILURE.format(stage="query-run", category="turn-limit") + "; exit code: 1)"
    )


@pytest.mark.parametrize(
    ("sig", "fact"), [(signal.SIGKILL, "signal: SIGKILL"), (signal.SIGTERM, "exit code: 143")]
)
async def test_cli_killed_mid_turn(
    server: FakeMessagesServer,
    make_provider: Any,
    make_request: Any,
    workspace: Path,
    wait_until: Callable[..., Any],
    sig: signal.Signals,
    fact: str,
) -> None:
    provider = make_provider(stderr="discard")
    server.queue_stall()
    run = await provider.start(make_request("stall", workspace))
    await wait_until(lambda: len(server.requests) == 1)
    process = run._transport.process
    assert process is not None
    os.kill(process.pid, sig)
    result = await run.result()
    await run.aclose()
    server.release_stalls()
    assert (
        result.diagnostic == FAILURE.format(stage="process", category="process-exit") + f"; {fact})"
    )


async def test_cancel_mid_turn_with_bash_tool_running(
    server: FakeMessagesServer,
    make_provider: Any,
    make_request: Any,
    workspace: Path,
    wait_until: Callable[..., Any],
) -> None:
    provider = make_provider(permission_mode="bypassPermissions", env={"IS_SANDBOX": "1"})
    command = 'python3 -c "import time; time.sleep(60)"'
    server.queue_tool_call("Bash", {"command": command, "description": "hold"})
    server.queue_text("never")
    run = await provider.start(make_request("run a long command", workspace))
    tree_id = _tree_id(run)

    def tools() -> list[int]:
        found = []
        for pid in marked_processes(tree_id):
            try:
                if "time.sleep(60)" in " ".join(psutil.Process(pid).cmdline()):
                    found.append(pid)
            except psutil.Error:
                continue
        return found

    await wait_until(lambda: bool(tools()))
    # A lone run (nice = "auto") runs at the host's own priority, its tool processes too.
    niceness = {os.getpriority(os.PRIO_PROCESS, pid) for pid in tools()}
    assert niceness == {os.getpriority(os.PRIO_PROCESS, 0)}
    began = time.monotonic()
    run.cancel()
    result = await run.result()
    settled = time.monotonic() - began
    await run.aclose()
    closed = time.monotonic() - began
    assert result.stop_reason == StopReason.ABORTED
    assert result.diagnostic is None
    assert result.output == ()
    assert settled < 0.1
    assert closed < 2.0, f"whole-tree exit took {closed:.2f}s"
    assert marked_processes(tree_id) == []


@pytest.mark.parametrize("steps", [0, 1, 3])
async def test_cancelled_start_leaves_no_cli_and_makes_no_model_request(
    server: FakeMessagesServer,
    make_provider: Any,
    make_request: Any,
    workspace: Path,
    own_marked_processes: Callable[[], list[int]],
    monkeypatch: pytest.MonkeyPatch,
    steps: int,
) -> None:
    # Once a process has reaped orphans, start() first suspends while it spawns the CLI. It used
    # to spawn from the SDK's query task instead, where cancelling start() could not stop it: the
    # CLI then started after the cancel, called the model, and start() raised only after ~2 s.
    await reap_orphans_once()
    spawned: list[str] = []
    real_spawn = SubprocessRuntime.spawn

    async def spawn_spy(self: SubprocessRuntime, spec: SpawnSpec) -> Any:
        spawned.append(str(spec.cwd))
        return await real_spawn(self, spec)

    monkeypatch.setattr(SubprocessRuntime, "spawn", spawn_spy)
    server.queue_stall()
    start = asyncio.ensure_future(make_provider().start(make_request("never asked", workspace)))
    if steps:
        # The run dir is made in a worker thread first: cancel once the spawn has begun, then
        # ``steps - 1`` loop steps later (bounded: at most 5 s).
        deadline = time.monotonic() + 5
        while not spawned and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.001)
        for _ in range(steps - 1):
            await asyncio.sleep(0)
    began = time.monotonic()
    start.cancel()
    with pytest.raises(asyncio.CancelledError):
        await start
    took = time.monotonic() - began
    assert own_marked_processes() == []  # whole-tree exit before start() raised
    if steps == 0:
        assert spawned == []  # start() never ran: nothing spawned
    else:
        assert spawned == [str(workspace)]  # the spawn happened in start()'s own task
    assert took < 1.5, f"cancelled start() took {took:.2f}s"
    await asyncio.sleep(1.0)  # a CLI left running would call the model by now (≈0.45 s)
    assert server.requests == []
