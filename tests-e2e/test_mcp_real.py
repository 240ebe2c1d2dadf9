"""``dsh mcp`` driven by the ``mcp`` SDK's own stdio client against the REAL products.

The client spawns the installed ``dsh`` console script (``dsh mcp --profile P --cwd W``). The
profile's providers point at the bundled loopback model servers, which run in this test process
on 127.0.0.1: Codex (``dsh.subagent_codex.testing``) and Claude Code
(``dsh.subagent_claude_code.testing``). No key and no network are needed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client, types

from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.subagent_codex.testing import (
    FakeResponsesServer,
    HttpStatus,
    MessageItem,
    RecordedRequest,
    Reply,
    Stall,
    write_codex_home,
)
from dsh.subagent_codex.testing import hermetic_env as codex_env
from dsh.subprocess import ManagedProcess, SpawnSpec, SubprocessRuntime, marked_processes
from dsh.tool_subagent import Harness

pytestmark = pytest.mark.real_product

DSH = Path(sys.executable).with_name("dsh")
CANARY = "canary-mcp-7f3a9d"
CODEX_FAILURE = (
    "subagent run failed\nDiagnostic: Product subagent failure"
    " (product: Codex; stage: turn; category: internalServerError)"
)
TOOL_NAMES = ["subagent_codex", "subagent_claude_code", "job_output", "job_list", "job_kill"]


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string for these characters


def _toml_env(env: Mapping[str, str]) -> str:
    return "{ " + ", ".join(f"{k} = {_toml_string(v)}" for k, v in env.items()) + " }"


def write_profile(tmp_path: Path, codex_base_url: str, claude_base_url: str) -> Path:
    codex_home = write_codex_home(tmp_path / "codex-home", codex_base_url, "mock-model")
    profile = tmp_path / "profile.toml"
    profile.write_text(
        "\n".join(
            [
                "[[provider]]",
                'kind = "codex"',
                "[provider.config]",
                "dispose_grace_ms = 1000",
                f"env = {_toml_env(codex_env(codex_home))}",
                "",
                "[[provider]]",
                'kind = "claude-code"',
                "[provider.config]",
                "dispose_grace_ms = 1000",
                f"env = {_toml_env(claude_env(tmp_path / 'claude-root', claude_base_url))}",
                "",
            ]
        ),
        encoding="utf-8",
    )
    return profile


def codex_route(request: RecordedRequest) -> Reply | HttpStatus | Stall | None:
    """Codex answers by task: ``FAIL ...`` → HTTP 500 with a canary body, ``STALL ...`` → stall."""
    task = request.task_text or ""
    if task.startswith("FAIL"):
        return HttpStatus(500, {"error": {"message": CANARY}})
    if task.startswith("STALL"):
        return Stall(seconds=60.0)
    return Reply((MessageItem(f"codex says: {task}"),))


@dataclass
class Client:
    session: ClientSession
    stderr: Path
    logs: list[types.LoggingMessageNotificationParams] = field(default_factory=list)
    log_arrived: anyio.Event = field(default_factory=anyio.Event)
    stream_errors: list[Exception] = field(default_factory=list)

    async def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        result = await self.session.call_tool(name, arguments, read_timeout_seconds=120)
        (block,) = result.content
        assert isinstance(block, types.TextContent)
        return block.text, bool(result.is_error)

    async def next_log(self, timeout: float = 90.0) -> types.LoggingMessageNotificationParams:  # noqa: ASYNC109
        with anyio.fail_after(timeout):
            while not self.logs:
                await self.log_arrived.wait()
                self.log_arrived = anyio.Event()
        return self.logs.pop(0)


@asynccontextmanager
async def mcp_client(profile: Path, workspace: Path) -> AsyncIterator[Client]:
    assert DSH.is_file(), f"the dsh console script is missing: {DSH}"
    params = StdioServerParameters(
        command=str(DSH),
        args=["mcp", "--profile", str(profile), "--cwd", str(workspace)],
        cwd=str(workspace),
    )
    holder: list[Client] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        holder[0].logs.append(params)
        holder[0].log_arrived.set()

    async def on_message(message: Any) -> None:
        # A line on the server's stdout that is not a JSON-RPC frame arrives here as an error.
        if isinstance(message, Exception):
            holder[0].stream_errors.append(message)

    stderr_path = workspace.parent / "dsh-mcp.stderr"
    with stderr_path.open("w", encoding="utf-8") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read_stream, write_stream),
            ClientSession(
                read_stream, write_stream, logging_callback=on_log, message_handler=on_message
            ) as session,
        ):
            client = Client(session, stderr_path)
            holder.append(client)
            with anyio.fail_after(60):
                await session.initialize()
            yield client
    assert client.stream_errors == [], "dsh mcp wrote something other than frames to stdout"
    assert "Traceback" not in stderr_path.read_text(encoding="utf-8")


def ours(root: Path) -> list[int]:
    """Live dsh-marked processes of this test: their env or cwd points under ``root``.

    Other suites on a shared machine may run marked processes too; the module's leak guard
    (``tests-e2e/conftest.py``) checks every marked process without this filter.
    """
    mine = []
    for pid in marked_processes():
        try:
            process = psutil.Process(pid)
            values = [*process.environ().values(), process.cwd()]
        except (psutil.Error, OSError):
            continue
        if any(str(root) in value for value in values):
            mine.append(pid)
    return mine


async def settle_ours(root: Path, timeout: float = 5.0) -> list[int]:  # noqa: ASYNC109
    """Our marked processes after a bounded wait that only absorbs reaping latency."""
    deadline = time.monotonic() + timeout
    while True:
        live = await anyio.to_thread.run_sync(ours, root)
        if not live or time.monotonic() > deadline:
            return live
        await anyio.sleep(0.05)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.mark.timeout(240)
async def test_dsh_mcp_serves_both_real_products_over_stdio(
    tmp_path: Path, workspace: Path
) -> None:
    async with FakeResponsesServer(route=codex_route) as codex, FakeMessagesServer() as claude:
        profile = write_profile(tmp_path, codex.base_url, claude.base_url)
        expected_tools = Harness.from_profile(profile).tools  # building starts nothing
        claude.queue_text("claude foreground answer", match="FG claude")
        claude.queue_text("claude background answer", match="BG claude")

        async with mcp_client(profile, workspace) as client:
            listed = (await client.session.list_tools()).tools
            assert [t.name for t in listed] == TOOL_NAMES
            for mcp_tool, tool in zip(listed, expected_tools, strict=True):
                assert (mcp_tool.name, mcp_tool.description) == (tool.name, tool.description)
                assert mcp_tool.input_schema == tool.input_schema

            # Foreground: each real product answers through the MCP tool call.
            codex_fg = await client.call(
                "subagent_codex", {"description": "fg codex", "prompt": "FG codex task 1"}
            )
            assert codex_fg == ("codex says: FG codex task 1", False)
            claude_fg = await client.call(
                "subagent_claude_code", {"description": "fg claude", "prompt": "FG claude task"}
            )
            assert claude_fg == ("claude foreground answer", False)

            # Background on Claude Code, collected by job_output with wait.
            started = await client.call(
                "subagent_claude_code",
                {"description": "bg claude", "prompt": "BG claude task", "run_in_background": True},
            )
            assert started == ("started background subagent job subagent-1", False)
            collected = await client.call(
                "job_output", {"job_id": "subagent-1", "wait": True, "timeout_ms": 90000}
            )
            assert collected == ("claude background answer\n[status: completed]", False)

            # Background on Codex: the completion notice arrives as an MCP log notification.
            started = await client.call(
                "subagent_codex",
                {"description": "bg codex", "prompt": "BG codex task 2", "run_in_background": True},
            )
            assert started == ("started background subagent job subagent-2", False)
            log = await client.next_log()
            assert (log.level, log.logger) == ("notice", "dsh.jobs")
            assert log.data == (
                "background job subagent-2 (subagent: bg codex) finished [status: completed]."
                " Read its output with job_output."
            )
            collected = await client.call("job_output", {"job_id": "subagent-2", "wait": True})
            assert collected == ("codex says: BG codex task 2\n[status: completed]", False)

            # A real model-side failure: isError with the safe diagnostic, no raw body.
            failed = await client.call(
                "subagent_codex", {"description": "fail codex", "prompt": "FAIL please"}
            )
            assert failed == (CODEX_FAILURE, True)
            assert CANARY not in failed[0]

            listing = await client.call("job_list", {})
            assert listing == (
                "subagent-1 [subagent] completed — bg claude\n"
                "subagent-2 [subagent] completed — bg codex",
                False,
            )
            # Only the job that finished unreported sent a notice (subagent-1 was waited on).
            assert client.logs == []

        assert await settle_ours(tmp_path) == []
    tasks = [r.task_text for r in codex.model_requests]
    assert tasks == ["FG codex task 1", "BG codex task 2", "FAIL please"]
    assert sorted(r.task for r in claude.requests if r.task) == [
        "BG claude task",
        "FG claude task",
    ]


@pytest.mark.timeout(180)
async def test_closing_the_client_cancels_running_jobs_and_leaves_no_process(
    tmp_path: Path, workspace: Path
) -> None:
    async with FakeResponsesServer(route=codex_route) as codex, FakeMessagesServer() as claude:
        profile = write_profile(tmp_path, codex.base_url, claude.base_url)
        claude.queue_stall(match="STALL claude")
        async with mcp_client(profile, workspace) as client:
            for tool, prompt in (
                ("subagent_codex", "STALL codex"),
                ("subagent_claude_code", "STALL claude"),
            ):
                text, is_error = await client.call(
                    tool, {"description": "stall", "prompt": prompt, "run_in_background": True}
                )
                assert not is_error, text
            await codex.wait_for_requests(1, timeout=90)
            assert await anyio.to_thread.run_sync(claude.wait_for_requests, 1, 90.0)
            live = await anyio.to_thread.run_sync(ours, tmp_path)
            assert len(live) >= 2  # both products are mid-turn
            running = await client.call("job_list", {})
            assert running[0].count(" running — stall") == 2
            began = time.monotonic()
        closed_in = time.monotonic() - began
        # The client closed stdin; the server cancelled the owner's jobs (trees exit) and
        # exited by itself, inside the SDK client's 2 s grace before it would signal.
        assert await settle_ours(tmp_path) == []
        assert closed_in < 2.0, f"dsh mcp took {closed_in:.2f}s to exit after stdin EOF"
        assert client.logs == []


async def _send(process: ManagedProcess, message: dict[str, Any]) -> None:
    assert process.stdin is not None
    process.stdin.write((json.dumps(message) + "\n").encode())
    await process.stdin.drain()


async def _response(process: ManagedProcess, request_id: int) -> dict[str, Any]:
    assert process.stdout is not None
    with anyio.fail_after(90):
        while True:
            line = await process.stdout.readline()
            assert line, "dsh mcp closed stdout before answering"
            frame: dict[str, Any] = json.loads(line)  # every stdout line is a frame
            if frame.get("id") == request_id:
                return frame


@pytest.mark.timeout(180)
async def test_sigterm_with_stdin_still_open_closes_the_trees_then_exits_0(
    tmp_path: Path, workspace: Path
) -> None:
    async with FakeResponsesServer(route=codex_route) as codex, FakeMessagesServer() as claude:
        profile = write_profile(tmp_path, codex.base_url, claude.base_url)
        runtime = SubprocessRuntime()
        try:
            process = await runtime.spawn(
                SpawnSpec(
                    argv=[str(DSH), "mcp", "--profile", str(profile)],
                    cwd=workspace,
                    stdin="pipe",
                    stdout="pipe",
                    stderr="ignore",
                )
            )
            await _send(
                process,
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {},
                        "clientInfo": {"name": "raw-client", "version": "0"},
                    },
                },
            )
            assert "result" in await _response(process, 1)
            await _send(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            arguments = {"description": "stall", "prompt": "STALL codex", "run_in_background": True}
            await _send(
                process,
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": "subagent_codex", "arguments": arguments},
                },
            )
            started = await _response(process, 2)
            assert started["result"]["content"][0]["text"] == (
                "started background subagent job subagent-1"
            )
            await codex.wait_for_requests(1, timeout=90)
            live = await anyio.to_thread.run_sync(ours, tmp_path)
            assert len(live) >= 2  # the server and the Codex tree, mid-turn
            os.kill(process.pid, signal.SIGTERM)  # stdin stays open: no EOF
            with anyio.fail_after(10):
                outcome = await process.wait()
            assert outcome.exit_code == 0
            assert await settle_ours(tmp_path) == []
        finally:
            await runtime.aclose()
