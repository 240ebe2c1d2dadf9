"""``dsh mcp`` driven by the ``mcp`` SDK's own stdio client against the REAL products.

The client spawns the installed ``dsh`` console script (``dsh mcp --profile P --cwd W``). The
profile's providers point at the bundled loopback model servers, which run in this test process
on 127.0.0.1: Codex (``dsh.subagent_codex.testing``) and Claude Code
(``dsh.subagent_claude_code.testing``). No key and no network are needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client, types
from mcp_client import LogInbox, SessionClient

from dsh.subagent.testing import TYPED_SCHEMA, TYPED_VALUE
from dsh.subagent_claude_code import testing as claude_testing
from dsh.subagent_claude_code.testing import Behaviour, FakeMessagesServer, host_tmp
from dsh.subagent_claude_code.testing import RecordedRequest as ClaudeRequest
from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.subagent_codex import testing as codex_testing
from dsh.subprocess import (
    Collect,
    ManagedProcess,
    SpawnSpec,
    SubprocessRuntime,
    marked_processes,
)
from dsh.tool_subagent import Harness
from dsh.tool_subagent._harness import default_tool_name
from dsh.tool_subagent._known_providers import KNOWN_PROVIDERS

pytestmark = pytest.mark.real_product

DSH = Path(sys.executable).with_name("dsh")
CANARY = "canary-mcp-7f3a9d"
CODEX_FAILURE = (
    "subagent run failed\nDiagnostic: Product subagent failure"
    " (product: Codex; stage: turn; category: internalServerError)"
)
TOOL_NAMES = ["subagent_codex", "subagent_claude_code", "job_output", "job_list", "job_kill"]
#: A background start's text; job ids are random (``subagent-<12 hex>``).
STARTED = re.compile(r"started background subagent job (subagent-[0-9a-f]{12})")


def started_id(started: tuple[str, bool]) -> str:
    """The job id a background start named, which the later calls use."""
    text, is_error = started
    assert not is_error, text
    match = STARTED.fullmatch(text)
    assert match is not None, text
    return match.group(1)


def assert_run_timings(timings: Mapping[str, float]) -> None:
    """dsh's own stamps of a run that answered: every stage reached, in order."""
    stages = ["started_s", "first_activity_s", "answer_s", "tree_exit_s"]
    assert list(timings) == stages
    values = [timings[stage] for stage in stages]
    assert values[0] > 0
    assert values == sorted(values)


def codex_route(
    request: codex_testing.RecordedRequest,
) -> codex_testing.Reply | codex_testing.HttpStatus | codex_testing.Stall | None:
    """Codex answers by task: ``FAIL ...`` → HTTP 500 with a canary body, ``STALL ...`` → stall."""
    task = request.task or ""
    if task.startswith("FAIL"):
        return codex_testing.HttpStatus(500, {"error": {"message": CANARY}})
    if task.startswith("STALL"):
        return codex_testing.Stall(seconds=60.0)
    if task.startswith("LOOP"):  # an endless tool loop: every response calls a command
        call = {"cmd": "true", "login": False, "yield_time_ms": 20000}
        return codex_testing.Reply((codex_testing.FunctionCallItem("exec_command", call),))
    return codex_testing.Reply((codex_testing.MessageItem(f"codex says: {task}"),))


@dataclass
class Servers:
    """Both loopback model servers (Codex's answering by task, ``codex_route``) and a profile
    that points both products at them (``tests-e2e/conftest.py``'s ``loopback``)."""

    codex: codex_testing.FakeResponsesServer
    claude: FakeMessagesServer
    profile: Path
    loopback: Any

    def stall_limited(self) -> Path:
        """The profile with one tool per provider under the stall limit (the default tools)."""
        tools = [
            {"provider": kind, "tool_name": name, "max_depth": "provider-managed"}
            | {"stall_timeout_s": MCP_STALL_S}
            for kind, name in (("codex", "subagent_codex"), ("claude-code", "subagent_claude_code"))
        ]
        profile = self.loopback.profile({"dispose_grace_ms": 1000}, tool=tools)
        written: Path = self.loopback.write(profile, self.loopback.root / "stall-profile.toml")
        return written


@pytest.fixture
def servers(loopback: Any) -> Servers:
    loopback.codex_route = codex_route
    profile = loopback.write(loopback.profile({"dispose_grace_ms": 1000}))
    return Servers(loopback.codex, loopback.claude, profile, loopback)


@dataclass
class Client(SessionClient):
    stderr: Path
    stream_errors: list[Exception] = field(default_factory=list)
    last_meta: dict[str, Any] | None = None

    async def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        result = await self.session.call_tool(name, arguments, read_timeout_seconds=120)
        self.last_meta = result.meta
        (block,) = result.content
        assert isinstance(block, types.TextContent)
        return block.text, bool(result.is_error)


@asynccontextmanager
async def mcp_client(profile: Path | None, workspace: Path) -> AsyncIterator[Client]:
    """``dsh mcp`` with ``profile`` (``None``: the default profile) and a client of the SDK's."""
    assert DSH.is_file(), f"the dsh console script is missing: {DSH}"
    # The SDK passes the server only a few variables of its own environment: hand it the
    # session's job store (tests-e2e/conftest.py), so it never writes the user's, and its import
    # path (a provider installed on it is served too).
    env = {
        name: os.environ[name] for name in ("XDG_STATE_HOME", "PYTHONPATH") if name in os.environ
    }
    chosen = [] if profile is None else ["--profile", str(profile)]
    params = StdioServerParameters(
        command=str(DSH),
        args=["mcp", *chosen, "--cwd", str(workspace)],
        cwd=str(workspace),
        env=env or None,
    )
    holder: list[Client] = []
    inbox = LogInbox(timeout_s=90.0)

    async def on_message(message: Any) -> None:
        # A line on the server's stdout that is not a JSON-RPC frame arrives here as an error.
        if isinstance(message, Exception):
            holder[0].stream_errors.append(message)

    stderr_path = workspace.parent / "dsh-mcp.stderr"
    with stderr_path.open("w", encoding="utf-8") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read_stream, write_stream),
            ClientSession(
                read_stream,
                write_stream,
                logging_callback=inbox.receive,
                message_handler=on_message,
            ) as session,
        ):
            client = Client(session, inbox, stderr_path)
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


def test_each_delegation_tool_names_its_product_and_model() -> None:
    harness = Harness.from_profile(
        {
            "provider": [
                {"kind": "codex", "config": {"model": "gpt-5.1-codex"}},
                {"kind": "claude-code"},
            ]
        }
    )
    codex, claude = (tool.description.split(". ")[0] for tool in harness.delegation_tools)
    assert codex == (
        'Delegate a self-contained task to a Codex subagent (provider "codex", model gpt-5.1-codex)'
    )
    assert (
        claude
        == 'Delegate a self-contained task to a Claude Code subagent (provider "claude-code")'
    )


async def test_the_default_profile_serves_one_delegation_tool_per_product(
    workspace: Path,
) -> None:
    """``dsh mcp`` with no profile serves every installed kind: the product table's products,
    each with its delegation tool naming the product, and the job tools (tools/list; listing
    starts no product)."""
    async with mcp_client(None, workspace) as client:
        listed = await client.session.list_tools()
    described = {tool.name: tool.description or "" for tool in listed.tools}
    delegation = [name for name in described if name not in ("job_output", "job_list", "job_kill")]
    assert sorted(delegation) == sorted(default_tool_name(k.kind) for k in KNOWN_PROVIDERS)
    for known in KNOWN_PROVIDERS:
        first = described[default_tool_name(known.kind)].split(". ")[0]
        assert first == (
            f"Delegate a self-contained task to a {known.product} subagent"
            f' (provider "{known.kind}")'
        )


@pytest.mark.timeout(240)
async def test_dsh_mcp_serves_both_real_products_over_stdio(
    tmp_path: Path, workspace: Path, servers: Servers
) -> None:
    codex, claude, profile = servers.codex, servers.claude, servers.profile
    expected_tools = Harness.from_profile(profile).tools  # building starts nothing
    claude.queue_text("claude foreground answer", match="FG claude")
    claude.queue_text("claude background answer", match="BG claude")
    codex.usage = dict(codex_testing.SAMPLE_USAGE)
    claude.usage = dict(claude_testing.SAMPLE_USAGE)

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
        # The text above is unchanged; the host-only usage facts ride in ``_meta``.
        assert client.last_meta is not None
        codex_usage = client.last_meta["dsh/usage"]
        assert {
            k: v for k, v in codex_usage.items() if k != "context_window"
        } == codex_testing.SAMPLE_USAGE_FACTS
        assert_run_timings(client.last_meta["dsh/timings"])
        claude_fg = await client.call(
            "subagent_claude_code", {"description": "fg claude", "prompt": "FG claude task"}
        )
        assert claude_fg == ("claude foreground answer", False)
        assert client.last_meta is not None
        claude_usage = client.last_meta["dsh/usage"]
        facts = claude_testing.SAMPLE_USAGE_FACTS
        assert {k: claude_usage[k] for k in facts} == facts
        assert claude_usage["cost_usd"] > 0
        assert_run_timings(client.last_meta["dsh/timings"])

        # Background on Claude Code, collected by job_output with wait.
        started = await client.call(
            "subagent_claude_code",
            {"description": "bg claude", "prompt": "BG claude task", "run_in_background": True},
        )
        claude_job = started_id(started)
        collected = await client.call(
            "job_output", {"job_id": claude_job, "wait": True, "timeout_ms": 90000}
        )
        assert collected == ("claude background answer\n[status: completed]", False)
        # A background job's host-only facts ride in job_output's ``_meta`` the same way.
        assert client.last_meta is not None
        assert client.last_meta["dsh/usage"] == claude_usage
        assert_run_timings(client.last_meta["dsh/timings"])

        # Background on Codex: the completion notice arrives as an MCP log notification.
        started = await client.call(
            "subagent_codex",
            {"description": "bg codex", "prompt": "BG codex task 2", "run_in_background": True},
        )
        codex_job = started_id(started)
        assert codex_job != claude_job
        log = await client.inbox.next()
        assert (log.level, log.logger) == ("notice", "dsh.jobs")
        assert log.data == (
            f"background job {codex_job} (subagent: bg codex) finished [status: completed]."
            " Read its output with job_output."
        )
        collected = await client.call("job_output", {"job_id": codex_job, "wait": True})
        assert collected == ("codex says: BG codex task 2\n[status: completed]", False)
        assert client.last_meta is not None
        assert client.last_meta["dsh/usage"] == codex_usage
        assert_run_timings(client.last_meta["dsh/timings"])

        # A real model-side failure: isError with the safe diagnostic, no raw body.
        failed = await client.call(
            "subagent_codex", {"description": "fail codex", "prompt": "FAIL please"}
        )
        assert failed == (CODEX_FAILURE, True)
        assert CANARY not in failed[0]

        # Finished jobs are listed newest first: the Codex job finished after the Claude one.
        listing = await client.call("job_list", {})
        assert listing == (
            f"{codex_job} [subagent] completed — bg codex\n"
            f"{claude_job} [subagent] completed — bg claude",
            False,
        )
        # Only the job that finished unreported sent a notice (the Claude job was waited on).
        assert client.inbox.logs == []

    assert await settle_ours(tmp_path) == []
    tasks = [r.task for r in codex.requests]
    assert tasks == ["FG codex task 1", "BG codex task 2", "FAIL please"]
    assert sorted(r.task for r in claude.requests if r.task) == [
        "BG claude task",
        "FG claude task",
    ]


@pytest.mark.timeout(180)
async def test_closing_the_client_cancels_running_jobs_and_leaves_no_process(
    tmp_path: Path, workspace: Path, servers: Servers
) -> None:
    codex, claude, profile = servers.codex, servers.claude, servers.profile
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
        assert await claude.wait_for_requests(1, timeout=90)
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
    assert client.inbox.logs == []


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
    tmp_path: Path, workspace: Path, servers: Servers
) -> None:
    codex, profile = servers.codex, servers.profile
    runtime = SubprocessRuntime()
    try:
        argv = [str(DSH), "mcp", "--profile", str(profile)]
        process = await _spawn_initialized(runtime, argv, workspace)
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
        assert STARTED.fullmatch(started["result"]["content"][0]["text"]), started
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


# ---- Claude Code's shutdown sequence: SIGINT, then SIGTERM 100 ms later -----------------------

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw-client", "version": "0"},
    },
}


async def _spawn_initialized(runtime: SubprocessRuntime, argv: list[str], cwd: Path) -> Any:
    process = await runtime.spawn(
        SpawnSpec(argv=argv, cwd=cwd, stdin="pipe", stdout="pipe", stderr="ignore")
    )
    await _send(process, INITIALIZE)
    assert "result" in await _response(process, 1)
    await _send(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    return process


async def _claude_code_shutdown(process: ManagedProcess) -> Any:
    """What Claude Code does to a stdio server: SIGINT, then SIGTERM 100 ms later."""
    os.kill(process.pid, signal.SIGINT)
    await anyio.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):  # already gone inside the 100 ms
        os.kill(process.pid, signal.SIGTERM)
    with anyio.fail_after(10):
        return await process.wait()


@asynccontextmanager
async def _stalled_foreground_codex_call(
    servers: Servers, root: Path
) -> AsyncIterator[ManagedProcess]:
    """``dsh mcp`` with request 2, a foreground Codex call, stalled mid-turn; its runtime is
    closed on the way out."""
    runtime = SubprocessRuntime()
    try:
        argv = [str(DSH), "mcp", "--profile", str(servers.profile)]
        process = await _spawn_initialized(runtime, argv, root / "workspace")
        call = {
            "name": "subagent_codex",
            "arguments": {"description": "stall", "prompt": "STALL codex"},
        }
        await _send(process, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
        await servers.codex.wait_for_requests(1, timeout=90)
        live = await anyio.to_thread.run_sync(ours, root)
        assert len(live) >= 2  # the server and the Codex tree, mid-turn
        yield process
    finally:
        await runtime.aclose()


@pytest.mark.timeout(60)
async def test_claude_codes_sigint_then_sigterm_leaves_an_idle_server_exiting_130(
    tmp_path: Path, workspace: Path
) -> None:
    runtime = SubprocessRuntime()
    try:
        process = await _spawn_initialized(runtime, [str(DSH), "mcp"], workspace)
        outcome = await _claude_code_shutdown(process)
    finally:
        await runtime.aclose()
    # Handled to the end: an exit code, never death by the default action of SIGTERM.
    assert (outcome.exit_code, outcome.signal) == (130, None)


@pytest.mark.timeout(120)
async def test_a_stop_right_after_the_handshake_is_a_clean_exit_every_time(
    tmp_path: Path, workspace: Path
) -> None:
    # With no pause after `initialized`, the SDK's replay of the opening request broke under the
    # cancel in 12 of 30 stops; the traceback path restored SIGTERM's default action, so the
    # SIGTERM 100 ms later killed the server (CI saw it once in the test above).
    outcomes = []
    for _ in range(8):
        runtime = SubprocessRuntime()
        try:
            process = await _spawn_initialized(runtime, [str(DSH), "mcp"], workspace)
            outcomes.append(await _claude_code_shutdown(process))
        finally:
            await runtime.aclose()
    assert [(o.exit_code, o.signal) for o in outcomes] == [(130, None)] * 8


@pytest.mark.timeout(180)
async def test_claude_codes_shutdown_with_a_run_in_flight_exits_the_tree_before_the_server(
    tmp_path: Path, workspace: Path, servers: Servers
) -> None:
    async with _stalled_foreground_codex_call(servers, tmp_path) as process:
        outcome = await _claude_code_shutdown(process)
        # A /proc walk the moment the server is reaped, with no settling: the Codex tree
        # exited before the server did.
        left = await anyio.to_thread.run_sync(ours, tmp_path)
    assert (outcome.exit_code, outcome.signal) == (130, None)
    assert left == []


# ---- the real hosts: `codex exec` and Claude Code, following docs/mcp.md ---------------------

DOCS = Path(__file__).resolve().parents[1] / "docs" / "mcp.md"
NAMESPACE = "mcp__dsh"
NOTICE_MARK = "finished [status:"


def recipe(name: str, substitutions: Mapping[str, str]) -> str:
    """The fenced block after ``<!-- recipe: NAME -->`` in docs/mcp.md, placeholders replaced."""
    text = DOCS.read_text(encoding="utf-8")
    marker = f"<!-- recipe: {name} -->\n```"
    start = text.index("\n", text.index(marker) + len(marker)) + 1
    body = text[start : text.index("```", start)]
    for placeholder, value in substitutions.items():
        body = body.replace(placeholder, value)
    return body


def recipe_commands(name: str, substitutions: Mapping[str, str]) -> list[list[str]]:
    return [shlex.split(line) for line in recipe(name, substitutions).splitlines() if line]


def claude_host_paths(tmp_path: Path, profile: Path, workspace: Path) -> dict[str, str]:
    """The recipes' placeholders for a Claude Code host, its ``dsh-mcp.json`` written."""
    mcp_json = tmp_path / "dsh-mcp.json"
    paths = {
        "/path/to/profile.toml": str(profile),
        "/path/to/project": str(workspace),
        "/path/to/dsh-mcp.json": str(mcp_json),
    }
    mcp_json.write_text(recipe("mcp-json", paths), encoding="utf-8")
    return paths


def claude_host_env(tmp_path: Path, base_url: str) -> dict[str, str]:
    """A hermetic environment for the Claude Code host talking to ``base_url``."""
    return {
        **claude_env(tmp_path / "host-claude-root", base_url),
        **host_tmp(tmp_path / "host-tmp"),
    }


@dataclass
class HostScript:
    """The host model's turns, decided from the tool results it has been sent so far.

    Delegate in the foreground, start a background job, poll ``job_list`` until a result
    carries the completion notice, read the job with ``job_output``, then answer.
    """

    foreground: tuple[str, dict[str, Any]]
    background: tuple[str, dict[str, Any]]
    deadline: float = field(default_factory=lambda: time.monotonic() + 150.0)
    seen: list[list[str]] = field(default_factory=list)

    def next_call(self, results: list[str]) -> tuple[str, dict[str, Any]] | None:
        self.seen.append(results)
        if len(results) == 0:
            return self.foreground
        if len(results) == 1:
            return self.background
        noticed = [i for i, text in enumerate(results) if NOTICE_MARK in text]
        if not noticed:
            if time.monotonic() > self.deadline:
                return None
            time.sleep(0.1)  # the route runs on the loopback server's own thread
            return ("job_list", {})
        if len(results) == noticed[0] + 1:
            match = STARTED.search(results[1])
            if match is None:  # no job id to read: end here (the host's checks then fail)
                return None
            return ("job_output", {"job_id": match.group(1)})
        return None

    @classmethod
    def delegating(cls, foreground: tuple[str, str], background: tuple[str, str]) -> HostScript:
        """``(tool, prompt)`` for the foreground call and for the background job."""
        fg_tool, fg_prompt = foreground
        bg_tool, bg_prompt = background
        return cls(
            (fg_tool, {"description": "fg job", "prompt": fg_prompt}),
            (bg_tool, {"description": "bg job", "prompt": bg_prompt, "run_in_background": True}),
        )

    @property
    def results(self) -> list[str]:
        """The tool results of the longest conversation the host sent."""
        return max(self.seen, key=len, default=[])


def _texts(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(str(part.get("text", "")) for part in content or [] if isinstance(part, dict))


def _function_outputs(request: codex_testing.RecordedRequest) -> list[str] | None:
    """The tool results a host's request carries, oldest first (``None``: not a turn)."""
    body = request.body
    if not isinstance(body, dict) or "input" not in body:
        return None
    return [
        _texts(item.get("output"))
        for item in body["input"]
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]


def _host_call(name: str, arguments: dict[str, Any], index: int) -> codex_testing.Reply:
    """The host model's next call of one of dsh's tools (through the MCP namespace)."""
    return codex_testing.Reply(
        (codex_testing.FunctionCallItem(name, arguments, f"call-{index}", namespace=NAMESPACE),)
    )


def codex_host_route(
    script: HostScript,
) -> Callable[[codex_testing.RecordedRequest], codex_testing.Reply | None]:
    def route(request: codex_testing.RecordedRequest) -> codex_testing.Reply | None:
        results = _function_outputs(request)
        if results is None:
            return None
        call = script.next_call(results)
        if call is None:
            return codex_testing.Reply((codex_testing.MessageItem("host done"),))
        name, arguments = call
        return _host_call(name, arguments, len(results))

    return route


def claude_host_route(script: HostScript) -> Callable[[ClaudeRequest], Behaviour | None]:
    def route(request: ClaudeRequest) -> Behaviour | None:
        call = script.next_call(request.tool_results)
        if call is None:
            return Behaviour("text", text="host done")
        name, arguments = call
        return Behaviour("tool_use", tool_name=f"{NAMESPACE}__{name}", tool_input=arguments)

    return route


@contextmanager
def threaded_responses_server(
    route: Callable[[codex_testing.RecordedRequest], codex_testing.Reply | None],
) -> Iterator[str]:
    """A ``FakeResponsesServer`` on a loop of its own (so its route may sleep); its base URL."""
    ready = threading.Event()
    state: dict[str, Any] = {}

    def serve() -> None:
        async def main() -> None:
            async with codex_testing.FakeResponsesServer(route=route) as server:
                state["url"], state["loop"] = server.base_url, asyncio.get_running_loop()
                state["stop"] = asyncio.Event()
                ready.set()
                await state["stop"].wait()

        asyncio.run(main())

    thread = threading.Thread(target=serve, name="host-model", daemon=True)
    thread.start()
    assert ready.wait(30), "the host model server did not start"
    try:
        yield str(state["url"])
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(30)


def _task(arguments: list[str]) -> list[str]:
    return ["Use dsh for this task." if arg == "TASK" else arg for arg in arguments]


def _product(name: str) -> str:
    assert name in ("codex", "claude"), name
    if name == "codex":
        import codex_cli_bin

        return str(codex_cli_bin.bundled_codex_path())
    import claude_agent_sdk

    return str(Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude")


async def _run_hosts(
    commands: list[list[str]], cwd: Path, env: Mapping[str, str]
) -> tuple[str, str]:
    """Run the recipe's commands in order (``codex``/``claude`` mean the pinned binaries, with
    the dsh script on ``PATH``); every one must exit 0; the last one's stdout and stderr."""
    env = {**env, "PATH": f"{DSH.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = err = ""
    runtime = SubprocessRuntime()
    try:
        for command in commands:
            argv = [_product(command[0]), *_task(command[1:])]
            process = await runtime.spawn(
                SpawnSpec(
                    argv=argv, cwd=cwd, env=env, stdout=Collect(1 << 20), stderr=Collect(1 << 20)
                )
            )
            with anyio.fail_after(240):
                outcome = await process.wait()
            out, err = process.collected("stdout").text, process.collected("stderr").text
            assert outcome.exit_code == 0, err[-3000:]
    finally:
        await runtime.aclose()
    return out, err


#: A token count the delegated products report: it reaches the MCP client only in ``_meta``
#: (test_dsh_mcp_serves_both_real_products_over_stdio reads it there), so a real host that kept
#: ``_meta`` out of its model's context never sends it to its model.
USAGE_CANARY = 918273


def report_usage_canary(
    codex: codex_testing.FakeResponsesServer, claude: FakeMessagesServer
) -> None:
    codex.usage = {"input_tokens": USAGE_CANARY, "output_tokens": 5, "total_tokens": 918278}
    claude.usage = {"input_tokens": USAGE_CANARY, "output_tokens": 5}


async def _run_claude_host(
    script: Any, commands: list[list[str]], root: Path, workspace: Path
) -> tuple[str, str, list[str]]:
    """Run the recipe's ``commands`` with the real Claude Code as the host, its model scripted by
    ``script``: stdout, stderr and every request body the host sent its model."""
    with FakeMessagesServer(route=claude_host_route(script)) as host:
        out, err = await _run_hosts(commands, workspace, claude_host_env(root, host.base_url))
        bodies = [json.dumps(request.body) for request in host.requests]
    return out, err, bodies


def _host_delegating(
    servers: Servers, foreground: str, background: str, claude_answer: str
) -> HostScript:
    """A host that delegates ``foreground`` in the foreground and ``background`` as a job, each
    to the product its prompt names; Claude Code's subagent answers its prompt with
    ``claude_answer`` (Codex's echoes), and both report the usage canary."""
    tools = {"codex": "subagent_codex", "claude": "subagent_claude_code"}
    foreground_tool, background_tool = (
        tools[prompt.split()[1]] for prompt in (foreground, background)
    )
    claude_prompt = foreground if foreground_tool == "subagent_claude_code" else background
    servers.claude.queue_text(claude_answer, match=claude_prompt)
    report_usage_canary(servers.codex, servers.claude)
    return HostScript.delegating((foreground_tool, foreground), (background_tool, background))


def assert_usage_stayed_host_side(model_inputs: list[str]) -> None:
    """Neither the count nor the ``dsh/`` meta keys reached what the host sent its model."""
    seen = "\n".join(model_inputs)
    assert str(USAGE_CANARY) not in seen
    assert "dsh/usage" not in seen
    assert "dsh/timings" not in seen


def _assert_host_saw(script: HostScript, foreground_answer: str, background_answer: str) -> None:
    results = script.results
    assert foreground_answer in results[0], results[0]
    match = STARTED.search(results[1])
    assert match is not None, results[1]
    notice = (
        f"background job {match.group(1)} (subagent: bg job) finished [status: completed]."
        " Read its output with job_output."
    )
    carrying = [i for i, text in enumerate(results) if notice in text]
    assert len(carrying) == 1, results  # in a tool result the host sent to its model, once
    assert f"{background_answer}\n[status: completed]" in results[carrying[0] + 1]


@pytest.mark.timeout(300)
async def test_codex_exec_as_mcp_host_delegates_and_sees_the_notice_in_a_tool_result(
    tmp_path: Path, workspace: Path, servers: Servers
) -> None:
    script = _host_delegating(
        servers, "FG codex host", "BG claude host", "claude background answer"
    )
    profile = servers.profile
    paths = {"/path/to/profile.toml": str(profile), "/path/to/project": str(workspace)}
    with threaded_responses_server(codex_host_route(script)) as host_url:
        home = codex_testing.write_codex_home(tmp_path / "host-codex-home", host_url, "mock-model")
        with (home / "config.toml").open("a", encoding="utf-8") as config:
            config.write("\n" + recipe("codex-config", paths))
        commands = recipe_commands("codex-exec", paths)
        assert [c[:2] for c in commands] == [["codex", "exec"]]
        env = {
            "CODEX_HOME": str(home),
            "HOME": str(home),
            codex_testing.FAKE_KEY_ENV: codex_testing.FAKE_API_KEY,
        }
        out, err = await _run_hosts(commands, workspace, {**env, "RUST_LOG": "error"})
    assert out.strip() == "host done", err[-3000:]
    _assert_host_saw(script, "codex says: FG codex host", "claude background answer")
    assert_usage_stayed_host_side([text for results in script.seen for text in results])
    assert await settle_ours(tmp_path) == []


@pytest.mark.parametrize("recipe_name", ["claude-mcp-add", "claude-mcp-config"])
@pytest.mark.timeout(300)
async def test_claude_code_as_mcp_host_delegates_and_sees_the_notice_in_a_tool_result(
    tmp_path: Path, workspace: Path, servers: Servers, recipe_name: str
) -> None:
    script = _host_delegating(
        servers, "FG claude host", "BG codex host", "claude foreground answer"
    )
    paths = claude_host_paths(tmp_path, servers.profile, workspace)
    commands = recipe_commands(recipe_name, paths)  # `claude mcp add`, then `claude -p`
    assert commands[-1][:2] == ["claude", "-p"]
    out, err, host_bodies = await _run_claude_host(script, commands, tmp_path, workspace)
    assert out.strip() == "host done", err[-3000:]
    _assert_host_saw(script, "claude foreground answer", "codex says: BG codex host")
    # Whole request bodies: everything the real host sent its model, tool results included.
    assert any("claude foreground answer" in body for body in host_bodies)
    assert_usage_stayed_host_side(host_bodies)
    assert await settle_ours(tmp_path) == []


@pytest.mark.timeout(240)
async def test_claude_code_as_mcp_host_receives_a_typed_tools_json(
    tmp_path: Path, workspace: Path, servers: Servers
) -> None:
    """A real host (``claude -p``) calls a dsh tool that declares ``outputSchema``; the value a
    real Codex answered with reaches the host's model as the value's JSON."""
    servers.loopback.codex_route = None  # Codex answers from its queue, whatever the task
    codex = servers.codex
    codex.queue_text(json.dumps(TYPED_VALUE), phase="final_answer")
    profile = servers.profile
    (tmp_path / "failing.json").write_text(json.dumps(TYPED_SCHEMA), encoding="utf-8")
    with profile.open("a", encoding="utf-8") as rows:
        rows.write(
            '[[tool]]\nprovider = "codex"\ntool_name = "failing_tests"\n'
            'enable_run_in_background = false\noutput_schema = "failing.json"\n'
        )
    paths = claude_host_paths(tmp_path, profile, workspace)
    task = {"description": "find the failing tests", "prompt": "List the failing tests."}

    def route(request: ClaudeRequest) -> Behaviour:
        if not request.tool_results:
            return Behaviour("tool_use", tool_name=f"{NAMESPACE}__failing_tests", tool_input=task)
        return Behaviour("text", text="host done")

    with FakeMessagesServer(route=route) as host:
        env = claude_host_env(tmp_path, host.base_url)
        out, err = await _run_hosts(recipe_commands("claude-mcp-config", paths), workspace, env)
        seen = [request.tool_results for request in host.requests]
    assert out.strip() == "host done", err[-3000:]
    (results,) = [r for r in seen if r]
    (text,) = results
    # What the host's model read: the value's compact JSON (as dsh's text content and its
    # structuredContent both give it).
    assert text == '{"failing":["test_a","test_b ✓"]}'
    (request,) = codex.requests
    assert request.body["text"]["format"]["schema"] == TYPED_SCHEMA
    assert await settle_ours(tmp_path) == []


# ---- closing stdin with requests pending; a profile without delegation tools ------------------


def _frames(text: str) -> dict[Any, dict[str, Any]]:
    """Every stdout line is a JSON-RPC frame; the responses by id."""
    frames = [json.loads(line) for line in text.splitlines() if line]
    return {frame["id"]: frame for frame in frames if "id" in frame}


@pytest.mark.timeout(60)
async def test_requests_pending_at_stdin_eof_are_answered_and_a_jobs_only_profile_warns(
    tmp_path: Path, workspace: Path
) -> None:
    profile = tmp_path / "jobs-only.toml"
    profile.write_text("[jobs]\n", encoding="utf-8")
    requests = [
        INITIALIZE,
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "job_list", "arguments": {}},
        },
    ]
    stdin = "".join(json.dumps(r) + "\n" for r in requests).encode()  # then EOF at once
    runtime = SubprocessRuntime()
    try:
        process = await runtime.spawn(
            SpawnSpec(
                argv=[str(DSH), "mcp", "--profile", str(profile)],
                cwd=workspace,
                stdin=stdin,
                stdout=Collect(1 << 20),
                stderr=Collect(1 << 16),
            )
        )
        with anyio.fail_after(30):
            outcome = await process.wait()
        out, err = process.collected("stdout").text, process.collected("stderr").text
    finally:
        await runtime.aclose()
    assert outcome.exit_code == 0
    answers = _frames(out)
    assert sorted(answers) == [1, 2, 3]
    assert [t["name"] for t in answers[2]["result"]["tools"]] == [
        "job_output",
        "job_list",
        "job_kill",
    ]
    assert answers[3]["result"]["content"] == [{"type": "text", "text": "(no background jobs)"}]
    assert "the profile serves no delegation tool" in err


async def test_a_tools_token_cap_stops_a_codex_tool_loop_served_over_mcp(
    tmp_path: Path, workspace: Path, servers: Servers
) -> None:
    # Each response reports 1,100 tokens: the 5,000-token cap of the profile's tool is crossed
    # by the 5th; the run stops there, tree exit first, and the host facts say what it spent.
    servers.codex.usage = {"input_tokens": 1000, "output_tokens": 100, "total_tokens": 1100}
    loopback = servers.loopback
    capped = {"provider": "codex", "tool_name": "capped", "max_total_tokens": 5000}
    settings = {"permission_mode": "dangerously-bypass-approvals-and-sandbox"}
    profile = loopback.write(loopback.profile(codex=settings, tool=[capped]))
    async with mcp_client(profile, workspace) as client:
        text, is_error = await client.call("capped", {"description": "loop", "prompt": "LOOP"})
        assert (text, is_error) == (
            "subagent run stopped: 5000 tokens spent (max_total_tokens)",
            True,
        )
        assert client.last_meta is not None
        assert 5500 <= client.last_meta["dsh/usage"]["total_tokens"] <= 6600
        assert await settle_ours(tmp_path) == []  # the Codex tree is gone; the server serves on


@pytest.mark.timeout(180)
async def test_notifications_cancelled_ends_a_real_foreground_run_and_its_tree(
    tmp_path: Path, workspace: Path, servers: Servers
) -> None:
    async with _stalled_foreground_codex_call(servers, tmp_path) as process:
        cancel = {"requestId": 2, "reason": "the user interrupted"}
        await _send(
            process, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}
        )
        deadline = time.monotonic() + 30
        live = await anyio.to_thread.run_sync(ours, tmp_path)
        while live != [process.pid] and time.monotonic() < deadline:
            await anyio.sleep(0.1)
            live = await anyio.to_thread.run_sync(ours, tmp_path)
        assert live == [process.pid]  # the Codex tree exited; the server serves on
        listing = {"name": "job_list", "arguments": {}}
        await _send(process, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": listing})
        answer = await _response(process, 3)
        assert answer["result"]["content"][0]["text"] == "(no background jobs)"
        assert process.stdin is not None
        process.stdin.close()
        with anyio.fail_after(10):
            outcome = await process.wait()
    assert outcome.exit_code == 0
    assert await settle_ours(tmp_path) == []


@pytest.mark.timeout(180)
async def test_codex_runs_the_read_only_job_tools_without_an_approval_setting(
    tmp_path: Path, workspace: Path, servers: Servers
) -> None:
    """The recipe without ``default_tools_approval_mode``: Codex's ``approval_policy = "never"``
    refuses unannotated MCP tools, and runs the ones marked ``readOnlyHint``."""
    calls = [
        ("job_list", {}),
        ("job_output", {"job_id": "subagent-9"}),
        ("job_kill", {"job_id": "x"}),
    ]
    seen: list[list[str]] = []

    def route(request: codex_testing.RecordedRequest) -> codex_testing.Reply | None:
        results = _function_outputs(request)
        if results is None:
            return None
        seen.append(results)
        if len(results) == len(calls):
            return codex_testing.Reply((codex_testing.MessageItem("host done"),))
        name, arguments = calls[len(results)]
        return _host_call(name, arguments, len(results))

    paths = {"/path/to/profile.toml": str(servers.profile), "/path/to/project": str(workspace)}
    config = "".join(
        line + "\n"
        for line in recipe("codex-config", paths).splitlines()
        if not line.startswith("default_tools_approval_mode")
    )
    with threaded_responses_server(route) as host_url:
        home = codex_testing.write_codex_home(tmp_path / "host-codex-home", host_url, "mock-model")
        with (home / "config.toml").open("a", encoding="utf-8") as file:
            file.write("\n" + config)
        env = {
            "CODEX_HOME": str(home),
            "HOME": str(home),
            codex_testing.FAKE_KEY_ENV: codex_testing.FAKE_API_KEY,
        }
        out, err = await _run_hosts(
            recipe_commands("codex-exec", paths), workspace, {**env, "RUST_LOG": "error"}
        )
    assert out.strip() == "host done", err[-3000:]
    listing, output, kill = max(seen, key=len)
    assert "(no background jobs)" in listing
    assert "unknown job subagent-9" in output
    assert "requires approval" in kill  # job_kill is not read-only: Codex asks, and may not
    assert await settle_ours(tmp_path) == []


# ---- the caller's stall limit through dsh mcp, driven by a real host --------------------------

MCP_STALL_S = 2
MCP_STALLED = "subagent run stopped: no product activity for 2 s (stall_timeout_s)"


@dataclass
class Arrival:
    at: float | None = None

    def mark(self) -> None:
        if self.at is None:
            self.at = time.monotonic()


@dataclass
class StallScript:
    """The host delegates once to a stalling subagent, then answers with what it got back;
    ``stalled`` is when the subagent's model request arrived (its server marks it)."""

    tool: str
    results: list[str] = field(default_factory=list)
    result_seen_at: float | None = None
    stalled: Arrival = field(default_factory=Arrival)

    def next_call(self, results: list[str]) -> tuple[str, dict[str, Any]] | None:
        if not results:
            return (self.tool, {"description": "stall job", "prompt": "STALL via mcp"})
        if self.result_seen_at is None:
            self.result_seen_at = time.monotonic()
            self.results = list(results)
        return None


def _assert_stopped_in_time(script: StallScript) -> None:
    stalled = script.stalled
    assert script.results, "the host never sent the delegation's tool result to its model"
    assert MCP_STALLED in script.results[0], script.results
    assert stalled.at is not None, "the subagent's model request never arrived"
    assert script.result_seen_at is not None
    # Limit + dispose grace (1 s in this profile) + the MCP hop and scheduling slack.
    took = script.result_seen_at - stalled.at
    assert MCP_STALL_S - 0.5 <= took <= MCP_STALL_S + 1.0 + 3.0, took


@pytest.mark.timeout(300)
async def test_codex_exec_as_host_gets_the_stall_limit_of_a_stalled_claude_code_subagent(
    tmp_path: Path, workspace: Path, servers: Servers
) -> None:
    script = StallScript("subagent_claude_code")

    def claude_route(request: ClaudeRequest) -> Behaviour | None:
        if request.task == "STALL via mcp":
            script.stalled.mark()
            return Behaviour("stall", seconds=40)
        return None

    servers.loopback.claude_route = claude_route
    profile = servers.stall_limited()
    paths = {"/path/to/profile.toml": str(profile), "/path/to/project": str(workspace)}
    with threaded_responses_server(codex_host_route(script)) as host_url:  # type: ignore[arg-type]
        home = codex_testing.write_codex_home(tmp_path / "host-codex-home", host_url, "mock-model")
        with (home / "config.toml").open("a", encoding="utf-8") as config:
            config.write("\n" + recipe("codex-config", paths))
        env = {
            "CODEX_HOME": str(home),
            "HOME": str(home),
            codex_testing.FAKE_KEY_ENV: codex_testing.FAKE_API_KEY,
        }
        commands = recipe_commands("codex-exec", paths)
        out, err = await _run_hosts(commands, workspace, {**env, "RUST_LOG": "error"})
    assert out.strip() == "host done", err[-3000:]
    _assert_stopped_in_time(script)
    assert await settle_ours(tmp_path) == []


@pytest.mark.timeout(300)
async def test_claude_code_as_host_gets_the_stall_limit_of_a_stalled_codex_subagent(
    tmp_path: Path, workspace: Path, servers: Servers
) -> None:
    script = StallScript("subagent_codex")

    def subagent_route(
        request: codex_testing.RecordedRequest,
    ) -> codex_testing.Reply | codex_testing.HttpStatus | codex_testing.Stall | None:
        if (request.task or "").startswith("STALL"):
            script.stalled.mark()
        return codex_route(request)

    servers.loopback.codex_route = subagent_route
    paths = claude_host_paths(tmp_path, servers.stall_limited(), workspace)
    commands = recipe_commands("claude-mcp-config", paths)
    out, err, _ = await _run_claude_host(script, commands, tmp_path, workspace)
    assert out.strip() == "host done", err[-3000:]
    _assert_stopped_in_time(script)
    assert await settle_ours(tmp_path) == []


#: Runs of the plain-entry check (issue 42): a miss was one in three before the opening answers.
PLAIN_ENTRY_RUNS = 10
EXPECTED_PLAIN_TOOLS = (
    "subagent_codex",
    "subagent_claude_code",
    "job_output",
    "job_list",
    "job_kill",
)


@pytest.mark.timeout(600)
async def test_codex_with_a_plain_mcp_servers_entry_offers_dshs_tools_in_its_first_request(
    tmp_path: Path, workspace: Path, servers: Servers
) -> None:
    """``[mcp_servers.dsh]`` with no ``required = true``: Codex sends its first model request
    after a short grace, not after every server is ready, so dsh must have answered
    ``initialize`` and ``tools/list`` by then (docs/mcp.md, "Start-up"). Each run asks the host
    model once, which answers at once: the first request is the one that matters."""
    firsts: list[list[str]] = []

    def route(request: codex_testing.RecordedRequest) -> codex_testing.Reply | None:
        body = request.body
        if not isinstance(body, dict) or "input" not in body:
            return None
        tools = json.dumps(body.get("tools", []))
        firsts.append([name for name in EXPECTED_PLAIN_TOOLS if f'"{name}"' in tools])
        return codex_testing.Reply((codex_testing.MessageItem("host done"),))

    entry = (
        "\n[mcp_servers.dsh]\n"
        'command = "dsh"\n'
        f'args = ["mcp", "--profile", {json.dumps(str(servers.profile))},'
        f' "--cwd", {json.dumps(str(workspace))}]\n'
    )
    with threaded_responses_server(route) as host_url:
        home = codex_testing.write_codex_home(tmp_path / "host-codex-home", host_url, "mock-model")
        with (home / "config.toml").open("a", encoding="utf-8") as config:
            config.write(entry)
        env = {
            "CODEX_HOME": str(home),
            "HOME": str(home),
            codex_testing.FAKE_KEY_ENV: codex_testing.FAKE_API_KEY,
        }
        command = ["codex", "exec", "--skip-git-repo-check", "TASK"]
        for _ in range(PLAIN_ENTRY_RUNS):
            out, err = await _run_hosts([command], workspace, {**env, "RUST_LOG": "error"})
            assert out.strip() == "host done", err[-3000:]
    assert firsts == [list(EXPECTED_PLAIN_TOOLS)] * PLAIN_ENTRY_RUNS
    assert await settle_ours(tmp_path) == []
