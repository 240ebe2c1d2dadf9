"""The MCP server's tool mapping, owners, notices and close, in-process over SDK memory streams.

No product runs here: the harness uses ``FakeProvider``. The real products and the stdio
transport are driven in ``tests-e2e/test_mcp_real.py``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from mcp import ClientSession, types
from mcp.shared.memory import create_client_server_memory_streams
from mcp_client import LogInbox, SessionClient

from dsh.jobs import JobDone, JobRegistry, JobStatus
from dsh.jobs.tools import job_tools
from dsh.subagent import (
    Descriptor,
    Parent,
    ResolvedStartRequest,
    SubagentService,
    SubagentStarted,
    TextBlock,
)
from dsh.subagent.kit import FailureFacts
from dsh.subagent.testing import FakeProvider
from dsh.tool_subagent import (
    Caller,
    Harness,
    SubagentTool,
    SubagentToolConfig,
    _cli,
    failure_text,
)
from dsh.tool_subagent._mcp import command as mcp_command
from dsh.tool_subagent._mcp.server import (
    NOTICE_LEVEL,
    NOTICE_LOGGER,
    new_caller,
    serve_connection,
)

FAILURE = FailureFacts(
    product="Codex", stage="turn", category="httpConnectionFailed", http_status=503
)


def started_id(started: tuple[str, bool]) -> str:
    """The job id a background start named (random: ``subagent-<12 hex>``)."""
    text, is_error = started
    match = re.fullmatch(r"started background subagent job (subagent-[0-9a-f]{12})", text)
    assert not is_error, started
    assert match is not None, started
    return match.group(1)


def make_harness(*providers: FakeProvider) -> Harness:
    service = SubagentService()
    jobs = JobRegistry()
    tools: list[Any] = []
    for provider in providers:
        service.register(provider)
        config = SubagentToolConfig(
            provider=provider.name,
            tool_name=f"subagent_{provider.name}",
            max_depth="provider-managed",
        )
        tools.append(SubagentTool(config, service, jobs))
    tools.extend(job_tools(jobs))
    return Harness(service, jobs, tuple(tools), {p.name: "fake" for p in providers})


def _request() -> ResolvedStartRequest:
    return ResolvedStartRequest(
        prompt=(TextBlock("y"),),
        parent=Parent(session_id="s", cwd=None),
        descriptor=Descriptor(provider="x"),
    )


@dataclass
class Connection(SessionClient):
    caller: Caller
    returned: list[Caller] = field(default_factory=list)
    riding: list[str] = field(default_factory=list)  # notices that rode on tool results

    async def call(self, name: str, arguments: dict[str, Any], **options: Any) -> tuple[str, bool]:
        """The first text block and ``isError``; a second block (notices) goes to ``riding``."""
        result = await self.session.call_tool(name, arguments, **options)
        texts = []
        for block in result.content:
            assert isinstance(block, types.TextContent)
            texts.append(block.text)
        assert 1 <= len(texts) <= 2
        self.riding.extend(texts[1:])
        return texts[0], bool(result.is_error)


@asynccontextmanager
async def connect(
    harness: Harness,
    cwd: str | None = "/work/dir",
    *,
    modern: bool = False,
    log_level: types.LoggingLevel | None = None,
    progress_interval_s: float | None = None,
) -> AsyncIterator[Connection]:
    """One MCP connection to ``harness``; on exit the client closes and the server returns."""
    inbox = LogInbox(timeout_s=5.0)
    async with create_client_server_memory_streams() as (client_streams, server_streams):
        caller = new_caller(cwd)
        owners: list[Caller] = []
        server_done = anyio.Event()

        async def run_server() -> None:
            try:
                options: dict[str, Any] = (
                    {}
                    if progress_interval_s is None
                    else {"progress_interval_s": progress_interval_s}
                )
                owners.append(
                    await serve_connection(harness, *server_streams, caller=caller, **options)
                )
            finally:
                server_done.set()

        async with anyio.create_task_group() as group:
            group.start_soon(run_server)
            async with ClientSession(
                *client_streams, logging_callback=inbox.receive, log_level=log_level
            ) as session:
                conn = Connection(session, inbox, caller, returned=owners)
                if modern:
                    await session.discover()  # the 2026-07-28 era: no handshake
                else:
                    await session.initialize()
                yield conn
                # Closing the client's write side is the connection's EOF.
                await client_streams[1].aclose()
                with anyio.fail_after(10):
                    await server_done.wait()


async def test_lists_every_tool_with_its_exact_name_description_and_schema() -> None:
    harness = make_harness(FakeProvider("fake"), FakeProvider("other"))
    async with harness, connect(harness) as conn:
        listed = (await conn.session.list_tools()).tools
    assert [t.name for t in listed] == [t.name for t in harness.tools]
    assert [t.name for t in listed] == [
        "subagent_fake",
        "subagent_other",
        "job_output",
        "job_list",
        "job_kill",
    ]
    for mcp_tool, tool in zip(listed, harness.tools, strict=True):
        assert mcp_tool.description == tool.description
        assert mcp_tool.input_schema == tool.input_schema
        assert mcp_tool.input_schema["additionalProperties"] is False


async def test_foreground_call_returns_the_answer_as_text_content() -> None:
    provider = FakeProvider("fake")
    harness = make_harness(provider)
    async with harness, connect(harness, cwd="/some/workspace") as conn:
        text, is_error = await conn.call(
            "subagent_fake", {"description": "echo a task", "prompt": "the exact task text"}
        )
    assert (text, is_error) == ("the exact task text", False)
    assert len(provider.requests) == 1
    parent = provider.requests[0].parent
    assert parent.cwd == "/some/workspace"
    assert parent.session_id == conn.caller.session_id
    assert parent.session_id.startswith("mcp-")
    assert provider.open_runs == ()


async def test_a_failure_is_is_error_with_the_safe_diagnostic() -> None:
    harness = make_harness(FakeProvider("fake", failure=FAILURE))
    async with harness, connect(harness) as conn:
        text, is_error = await conn.call("subagent_fake", {"description": "x", "prompt": "y"})
    assert is_error is True
    assert text == (
        "subagent run failed\nDiagnostic: Product subagent failure"
        " (product: Codex; stage: turn; category: httpConnectionFailed; HTTP status: 503)"
    )
    assert text == failure_text(FakeProvider("x", failure=FAILURE).script_for(_request()))


async def test_invalid_arguments_and_unknown_tools_are_is_error_results() -> None:
    harness = make_harness(FakeProvider("fake"))
    async with harness, connect(harness) as conn:
        missing = await conn.call("subagent_fake", {"description": "only a label"})
        extra = await conn.call("subagent_fake", {"description": "a", "prompt": "b", "model": "x"})
        unknown = await conn.call("no_such_tool", {})
        job = await conn.call("job_output", {"job_id": "subagent-99"})
    assert missing[1]
    assert "prompt" in missing[0]
    assert extra[1]
    assert "model" in extra[0]
    assert unknown == (
        'unknown tool "no_such_tool" (tools: subagent_fake, job_output, job_list, job_kill)',
        True,
    )
    assert job == ("unknown job subagent-99", True)


async def test_background_job_sends_a_completion_log_notification_then_job_output() -> None:
    harness = make_harness(FakeProvider("fake", delay=0.05))
    async with harness, connect(harness) as conn:
        started = await conn.call(
            "subagent_fake",
            {"description": "background echo", "prompt": "answer later", "run_in_background": True},
        )
        job_id = started_id(started)
        log = await conn.inbox.next()
        output = await conn.call("job_output", {"job_id": job_id, "wait": True})
        listing = await conn.call("job_list", {})
    assert log.level == NOTICE_LEVEL
    assert log.logger == NOTICE_LOGGER
    assert log.data == _notice(job_id, "background echo")
    assert output == ("answer later\n[status: completed]", False)
    assert listing == (f"{job_id} [subagent] completed — background echo", False)


async def test_job_output_with_wait_collects_a_running_job_and_sends_no_notice() -> None:
    harness = make_harness(FakeProvider("fake", delay=0.3))
    async with harness, connect(harness) as conn:
        job_id = started_id(
            await conn.call(
                "subagent_fake",
                {"description": "slow", "prompt": "slow answer", "run_in_background": True},
            )
        )
        output = await conn.call("job_output", {"job_id": job_id, "wait": True, "timeout_ms": 5000})
        await conn.session.send_ping()
    assert output == ("slow answer\n[status: completed]", False)
    assert conn.inbox.logs == []


@pytest.mark.filterwarnings("ignore::mcp.MCPDeprecationWarning")
async def test_set_level_above_notice_suppresses_notifications() -> None:
    harness = make_harness(FakeProvider("fake", delay=0.0))
    done: list[JobDone] = []
    settled = anyio.Event()

    def on_done(event: JobDone) -> None:
        done.append(event)
        settled.set()

    harness.jobs.on_job_done(on_done)
    async with harness, connect(harness) as conn:
        await conn.session.set_logging_level("warning")
        await conn.call(
            "subagent_fake", {"description": "a", "prompt": "b", "run_in_background": True}
        )
        with anyio.fail_after(5):
            await settled.wait()
        await conn.session.send_ping()
    assert done[0].notice is not None  # a notice was due, and the client's level filtered it
    assert conn.inbox.logs == []


@pytest.mark.parametrize("log_level", ["info", None])
async def test_a_modern_connection_gets_notices_on_its_next_opted_in_tool_call(
    log_level: types.LoggingLevel | None,
) -> None:
    harness = make_harness(FakeProvider("fake", delay=0.0))
    settled = anyio.Event()
    harness.jobs.on_job_done(lambda event: settled.set())
    async with harness, connect(harness, modern=True, log_level=log_level) as conn:
        assert conn.session.protocol_version == "2026-07-28"
        job_id = started_id(
            await conn.call(
                "subagent_fake", {"description": "a", "prompt": "b", "run_in_background": True}
            )
        )
        with anyio.fail_after(5):
            await settled.wait()
        before = list(conn.inbox.logs)
        listing = await conn.call("job_list", {})
    assert before == []  # log delivery is request-scoped in this era: nothing unsolicited
    assert listing == (f"{job_id} [subagent] completed — a", False)
    if log_level is None:
        assert conn.inbox.logs == []  # the client never opted in
    else:
        assert [log.data for log in conn.inbox.logs] == [_notice(job_id, "a")]


async def test_closing_the_connection_cancels_the_owners_jobs_and_closes_their_runs() -> None:
    provider = FakeProvider("fake", delay=None)  # only a cancel ends these runs
    harness = make_harness(provider)
    both_started = anyio.Event()

    def on_event(event: object) -> None:
        if isinstance(event, SubagentStarted) and len(provider.runs) == 2:
            both_started.set()

    harness.subagents.subscribe(on_event)
    async with harness:
        async with connect(harness) as conn:
            ids = [
                started_id(
                    await conn.call(
                        "subagent_fake",
                        {"description": f"hang {n}", "prompt": "never", "run_in_background": True},
                    )
                )
                for n in range(2)
            ]
            assert len(set(ids)) == 2
            with anyio.fail_after(5):
                await both_started.wait()
            open_before = len(provider.open_runs)
        owner = conn.caller
        assert conn.returned == [owner]
        # serve_connection returned only after the owner's jobs were cancelled and awaited.
        assert open_before == 2
        assert len(provider.open_runs) == 0
        assert all(run.cancel_reasons for run in provider.runs)
        # The owner's records stay readable after its close, each settled as killed.
        assert [(job.id, job.status) for job in harness.jobs.list(owner)] == [
            (ids[0], JobStatus.KILLED),
            (ids[1], JobStatus.KILLED),
        ]
        assert conn.inbox.logs == []


async def test_each_connection_is_its_own_owner() -> None:
    harness = make_harness(FakeProvider("fake", delay=None))
    async with harness, connect(harness) as first, connect(harness) as second:
        job_id = started_id(
            await first.call(
                "subagent_fake", {"description": "a", "prompt": "b", "run_in_background": True}
            )
        )
        foreign = await second.call("job_output", {"job_id": job_id})
        kill = await second.call("job_kill", {"job_id": job_id})
        mine = await first.call("job_list", {})
        theirs = await second.call("job_list", {})
    # Another connection's job answers exactly as an unknown id, and its kill changes nothing.
    assert foreign == (f"unknown job {job_id}", True)
    assert kill == (f"unknown job {job_id}", True)
    assert mine == (f"{job_id} [subagent] running — a", False)
    assert theirs == ("(no background jobs)", False)
    assert first.caller.session_id != second.caller.session_id


def test_a_missing_mcp_sdk_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in list(sys.modules):
        if name == "mcp" or name.startswith("mcp.") or name == "dsh.tool_subagent._mcp.server":
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mcp", None)  # makes `import mcp` raise ImportError
    with pytest.raises(ImportError) as raised:
        mcp_command.load_server_module()
    assert 'pip install "dsh-tool-subagent[mcp]"' in str(raised.value)
    assert _cli.main(["mcp"]) == 1
    assert 'pip install "dsh-tool-subagent[mcp]"' in capsys.readouterr().err


def test_an_invalid_profile_exits_2_before_serving(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "bad.toml"
    profile.write_text("[[tool]]\nprovider = 'nobody'\nbogus = 1\n", encoding="utf-8")
    assert _cli.main(["mcp", "--profile", str(profile)]) == 2
    captured = capsys.readouterr()
    assert "dsh: invalid profile: tool[0].bogus" in captured.err
    assert captured.out == ""


def _settled(harness: Harness, count: int) -> anyio.Event:
    """Set once ``count`` jobs of ``harness`` have settled."""
    done: list[JobDone] = []
    event = anyio.Event()

    def on_done(job: JobDone) -> None:
        done.append(job)
        if len(done) >= count:
            event.set()

    harness.jobs.on_job_done(on_done)
    return event


def _notice(job_id: str, label: str) -> str:
    return (
        f"background job {job_id} (subagent: {label}) finished [status: completed]."
        " Read its output with job_output."
    )


async def test_tools_carry_behaviour_annotations() -> None:
    harness = make_harness(FakeProvider("fake"))
    async with harness, connect(harness) as conn:
        listed = {t.name: t.annotations for t in (await conn.session.list_tools()).tools}
    for name in ("job_list", "job_output"):
        hints = listed[name]
        assert hints is not None
        assert hints.read_only_hint is True, name  # Codex runs these without approval

    def flags(name: str) -> tuple[bool | None, bool | None, bool | None]:
        """The tool's read-only, destructive and idempotent hints."""
        found = listed[name]
        assert found is not None
        return (found.read_only_hint, found.destructive_hint, found.idempotent_hint)

    assert flags("job_kill") == (False, True, True)
    assert flags("subagent_fake") == (False, True, False)
    delegate = listed["subagent_fake"]
    assert delegate is not None
    assert delegate.open_world_hint is True


async def test_a_completion_notice_rides_on_the_next_tool_result_once() -> None:
    harness = make_harness(FakeProvider("fake", delay=0.0))
    settled = _settled(harness, 1)
    async with harness, connect(harness, modern=True) as conn:  # no log delivery at all
        started = await conn.call(
            "subagent_fake", {"description": "bg one", "prompt": "x", "run_in_background": True}
        )
        job_id = started_id(started)
        assert conn.riding == []
        with anyio.fail_after(5):
            await settled.wait()
        listing = await conn.call("job_list", {})
        assert conn.riding == [_notice(job_id, "bg one")]
        again = await conn.call("job_list", {})
        unknown = await conn.call("no_such_tool", {})
    assert listing == again == (f"{job_id} [subagent] completed — bg one", False)
    assert unknown[1] is True
    assert conn.riding == [_notice(job_id, "bg one")]  # once each
    assert conn.inbox.logs == []


async def test_a_job_read_before_the_next_result_brings_no_notice() -> None:
    harness = make_harness(FakeProvider("fake", delay=0.0))
    settled = _settled(harness, 1)
    async with harness, connect(harness) as conn:
        job_id = started_id(
            await conn.call(
                "subagent_fake", {"description": "a", "prompt": "b", "run_in_background": True}
            )
        )
        with anyio.fail_after(5):
            await settled.wait()
        output = await conn.call("job_output", {"job_id": job_id})
        await conn.call("job_list", {})
    assert output == ("b\n[status: completed]", False)
    assert conn.riding == []


async def test_notices_on_one_result_are_bounded_and_the_rest_ride_the_next() -> None:
    harness = make_harness(FakeProvider("fake", delay=0.5))  # all seven start before any ends
    settled = _settled(harness, 7)
    async with harness, connect(harness) as conn:
        ids = {
            n: started_id(
                await conn.call(
                    "subagent_fake",
                    {"description": f"j{n}", "prompt": "p", "run_in_background": True},
                )
            )
            for n in range(1, 8)
        }
        with anyio.fail_after(5):
            await settled.wait()
        await conn.call("job_list", {})
        await conn.call("job_list", {})
        await conn.call("job_list", {})
    first, second = conn.riding
    assert first.splitlines() == [_notice(ids[n], f"j{n}") for n in range(1, 6)]
    assert second.splitlines() == [_notice(ids[n], f"j{n}") for n in (6, 7)]


async def test_a_long_call_with_a_progress_token_reports_elapsed_time() -> None:
    harness = make_harness(FakeProvider("fake", delay=0.55))
    reports: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    async with harness, connect(harness, progress_interval_s=0.1) as conn:
        answer = await conn.call(
            "subagent_fake",
            {"description": "slow", "prompt": "late"},
            progress_callback=on_progress,
        )
        quiet: list[float] = []
        await conn.call("job_list", {}, progress_callback=lambda p, t, m: quiet.append(p))
    assert answer == ("late", False)
    assert len(reports) >= 3
    progress = [p for p, _, _ in reports]
    assert progress == sorted(progress)
    assert len(set(progress)) == len(progress)
    assert all(total is None for _, total, _ in reports)
    assert reports[0][2] == "subagent_fake: running, 0 s elapsed"
    assert quiet == []  # a quick call ends before the first report


async def test_a_cancelled_foreground_call_cancels_its_run_and_closes_it() -> None:
    provider = FakeProvider("fake", delay=None)  # only a cancel ends this run
    harness = make_harness(provider)
    started = anyio.Event()
    harness.subagents.subscribe(
        lambda event: started.set() if isinstance(event, SubagentStarted) else None
    )
    async with harness, connect(harness) as conn:
        async with anyio.create_task_group() as group:

            async def call() -> None:
                await conn.session.call_tool("subagent_fake", {"description": "x", "prompt": "y"})

            group.start_soon(call)
            with anyio.fail_after(5):
                await started.wait()
            group.cancel_scope.cancel()  # the SDK client sends notifications/cancelled
        with anyio.fail_after(5):
            while provider.open_runs:  # noqa: ASYNC110 - a fake's run list has no event
                await anyio.sleep(0.01)
        listing = await conn.call("job_list", {})  # the connection still serves
    (run,) = provider.runs
    assert run.cancel_reasons
    assert listing == ("(no background jobs)", False)


def _frame(request_id: int | None, method: str, params: dict[str, Any] | None = None) -> Any:
    from mcp.shared.message import SessionMessage
    from mcp.types import JSONRPCNotification, JSONRPCRequest

    if request_id is None:
        return SessionMessage(JSONRPCNotification(jsonrpc="2.0", method=method, params=params))
    return SessionMessage(
        JSONRPCRequest(jsonrpc="2.0", id=request_id, method=method, params=params)
    )


async def test_requests_pending_when_the_input_closes_are_all_answered() -> None:
    provider = FakeProvider("fake", delay=None)
    harness = make_harness(provider)
    initialize = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    }
    frames = [
        _frame(1, "initialize", initialize),
        _frame(None, "notifications/initialized"),
        _frame(2, "tools/list"),
        _frame(3, "tools/call", {"name": "job_list", "arguments": {}}),
        _frame(
            4,
            "tools/call",
            {"name": "subagent_fake", "arguments": {"description": "x", "prompt": "y"}},
        ),
    ]
    answers: dict[Any, Any] = {}
    async with (
        harness,
        create_client_server_memory_streams() as (client, server),
        anyio.create_task_group() as group,
    ):
        group.start_soon(lambda: serve_connection(harness, *server))
        client_read, client_write = client
        for frame in frames:
            await client_write.send(frame)
        await client_write.aclose()  # EOF with requests 2-4 still pending
        with anyio.fail_after(10):
            async for item in client_read:
                assert not isinstance(item, Exception)
                message = item.message
                answers[getattr(message, "id", None)] = message
                if len(answers) == 4:
                    break
    assert sorted(answers) == [1, 2, 3, 4]
    assert [t["name"] for t in answers[2].result["tools"]][-3:] == [
        "job_output",
        "job_list",
        "job_kill",
    ]
    assert answers[3].result["content"][0]["text"] == "(no background jobs)"
    running = answers[4].result
    assert running["isError"] is True
    assert running["content"][0]["text"] == (
        "the call was cancelled: the MCP client closed the connection"
    )
    assert provider.open_runs == ()


def test_descriptions_name_the_product_and_the_model() -> None:
    service, jobs = SubagentService(), JobRegistry()
    first, second = FakeProvider("codex-a"), FakeProvider("codex-b")
    first.config = SimpleNamespace(model="gpt-5.1-codex")  # type: ignore[attr-defined]
    for provider in (first, second):
        service.register(provider)
    tools = [
        SubagentTool(
            SubagentToolConfig(provider=p.name, tool_name=f"t_{n}", max_depth="provider-managed"),
            service,
            jobs,
            product="Codex",
        )
        for n, p in enumerate((first, second))
    ]
    described = [tool.description.split(". ")[0] for tool in tools]
    assert described == [
        "Delegate a self-contained task to a Codex subagent"
        ' (provider "codex-a", model gpt-5.1-codex)',
        'Delegate a self-contained task to a Codex subagent (provider "codex-b")',
    ]


def test_a_missing_anyio_names_the_extra_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A [codex]-only install has neither mcp nor anyio; the server module imports anyio first.
    for name in list(sys.modules):
        server_side = name.startswith("dsh.tool_subagent._mcp.") and name != mcp_command.__name__
        if name.startswith(("mcp", "anyio")) or server_side:
            monkeypatch.delitem(sys.modules, name)
    for name in ("mcp", "mcp_types", "anyio"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError) as raised:
        mcp_command.load_server_module()
    assert str(raised.value) == mcp_command.MCP_MISSING
    assert _cli.main(["mcp"]) == 1
    assert capsys.readouterr().err == f"dsh: {mcp_command.MCP_MISSING}\n"
