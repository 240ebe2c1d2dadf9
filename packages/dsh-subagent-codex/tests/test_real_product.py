"""Keyless real-product tests with the pinned Codex binary (mandatory: they fail, never skip)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import codex_cli_bin
import pytest

from dsh.subagent import ProductFailure, StopReason
from dsh.subagent.testing import decoy_program, run_provider_conformance
from dsh.subagent_codex import CodexProvider, CodexProviderConfig
from dsh.subagent_codex import testing as codex_testing
from dsh.subprocess import marked_processes
from dsh.subprocess._contention import contention

pytestmark = pytest.mark.real_product
Env = Any
CANARY = "CANARY-7f3e9b1c-secret"


async def test_model_reaches_thread_start_and_request_body(codex_env: Env) -> None:
    codex_env.server.queue_text("one")
    codex_env.server.queue_text("two")
    async with await codex_env.provider(model="explicit-model").start(
        codex_env.request("a")
    ) as run:
        assert (await run.result()).text == "one"
    async with await codex_env.provider().start(codex_env.request("b")) as run:
        assert (await run.result()).text == "two"
    first, second = codex_env.server.requests
    assert first.body["model"] == "explicit-model"
    assert _metadata_of(codex_env.server, 0)["model"] == "explicit-model"
    assert second.body["model"] == "mock-model"  # the native choice from config.toml


async def test_two_named_instances_run_concurrently_and_cancel_is_isolated(tmp_path: Path) -> None:
    async with (
        codex_testing.FakeResponsesServer() as server_a,
        codex_testing.FakeResponsesServer() as server_b,
    ):
        ws = tmp_path / "ws"
        ws.mkdir()
        home_a = codex_testing.write_codex_home(tmp_path / "a", server_a.base_url, "native-a")
        home_b = codex_testing.write_codex_home(tmp_path / "b", server_b.base_url, "native-b")
        provider_a = CodexProvider(
            CodexProviderConfig(
                provider_name="codex-a",
                model="model-a",
                env=codex_testing.hermetic_env(home_a, api_key="sk-a"),
            )
        )
        provider_b = CodexProvider(
            CodexProviderConfig(
                provider_name="codex-b",
                model="model-b",
                env=codex_testing.hermetic_env(home_b, api_key="sk-b"),
            )
        )
        server_a.queue_text("answer a")
        server_b.queue_stall(seconds=30)
        run_a, run_b = await asyncio.gather(
            provider_a.start(codex_testing.make_start_request(ws, "task a", provider="codex-a")),
            provider_b.start(codex_testing.make_start_request(ws, "task b", provider="codex-b")),
        )
        try:
            await server_b.wait_for_requests(1)
            run_b.cancel()
            result_b = await run_b.result()
            result_a = await run_a.result()
        finally:
            await asyncio.gather(run_a.aclose(), run_b.aclose())
        assert result_b.stop_reason is StopReason.ABORTED
        assert result_a.stop_reason is StopReason.COMPLETED
        assert result_a.text == "answer a"
        (req_a,) = server_a.requests
        (req_b,) = server_b.requests
        assert req_a.body["model"] == "model-a"
        assert req_b.body["model"] == "model-b"
        assert req_a.headers["authorization"] == "Bearer sk-a"
        assert req_b.headers["authorization"] == "Bearer sk-b"


def _metadata_of(server: codex_testing.FakeResponsesServer, index: int) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(server.requests[index].headers["x-codex-turn-metadata"])
    return value


def _tool_outputs(server: codex_testing.FakeResponsesServer) -> list[str]:
    """The newest tool result the model got in each follow-up request (one per tool call here)."""
    outputs: list[str] = []
    for request in server.requests[1:]:
        results = [i for i in request.body["input"] if i["type"] == "function_call_output"]
        outputs.append(results[-1]["output"])
    return outputs


def _apply_patch_heredoc(path: str) -> str:
    # Codex intercepts an ``apply_patch`` heredoc in exec_command and runs it as a file change.
    return (
        "apply_patch <<'EOF'\n*** Begin Patch\n"
        f"*** Add File: {path}\n+hi there\n*** End Patch\nEOF\n"
    )


async def test_never_overrides_ambient_on_request_and_denies_the_write(
    fake: codex_testing.FakeResponsesServer, tmp_path: Path
) -> None:
    home = codex_testing.write_codex_home(
        tmp_path / "home", fake.base_url, "mock-model", approval_policy="on-request"
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    escalate = {
        "cmd": "touch made.txt",
        "sandbox_permissions": "require_escalated",
        "justification": "the task needs this file",
        "login": False,
        "yield_time_ms": 20000,
    }
    plain = {"cmd": "touch made2.txt", "login": False, "yield_time_ms": 20000}
    patch = {"cmd": _apply_patch_heredoc("made3.txt"), "login": False, "yield_time_ms": 20000}
    for arguments in (escalate, plain, patch):
        fake.queue(
            codex_testing.Reply((codex_testing.FunctionCallItem("exec_command", arguments),))
        )
    fake.queue(codex_testing.HttpStatus(500, {"error": {"message": "boom"}}))
    provider = CodexProvider(CodexProviderConfig(env=codex_testing.hermetic_env(home)))
    async with await provider.start(codex_testing.make_start_request(ws, "write a file")) as run:
        result = await run.result()
    assert list(ws.iterdir()) == []
    # Under the ambient on-request policy the escalation would raise an approval request, which
    # the provider answers "cancel" (the turn would end interrupted after one POST). Under the
    # thread-level "never" Codex rejects all three writes itself and asks the model again.
    assert len(fake.requests) == 4
    assert _metadata_of(fake, 0)["sandbox_mode"] == "read-only"
    escalated, sandboxed, patched = _tool_outputs(fake)
    assert escalated.startswith("approval policy is Never; reject command")
    assert "Read-only file system" in sandboxed
    assert patched.startswith("patch rejected: writing is blocked by read-only sandbox")
    # Codex 0.163.0 sends no server request and no declined item for any of these three, so
    # there is no permission fact: the diagnostic is the failure line alone (see the docs,
    # "Permission facts under never"; approve-for-me below proves the two-line form for real).
    assert result.stop_reason is StopReason.ERROR
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn; category: internalServerError)"
    )


_DENY = (
    '{"risk_level":"critical","user_authorization":"unknown","outcome":"deny",'
    '"rationale":"the fake reviewer denies every action"}'
)
_ALLOW = '{"outcome":"allow"}'
_FACTS = {
    "command": "request: command execution; decision: declined): Codex declined the command",
    "file": "request: file change; decision: declined): Codex declined the file change",
}


async def _reviewed_write(tmp_path: Path, what: str, verdict: str) -> tuple[Any, list[Any], Path]:
    """One approve-for-me run whose single write needs the automatic reviewer's verdict."""
    ws = tmp_path / "ws"
    ws.mkdir()
    if what == "command":
        # An escalation request goes to the reviewer whatever the target.
        target = ws / "made.txt"
        arguments: dict[str, Any] = {
            "cmd": "touch made.txt",
            "sandbox_permissions": "require_escalated",
            "justification": "the task needs this file",
        }
    else:
        # A patch outside the writable roots goes to the reviewer (/tmp is excluded below).
        target = tmp_path / "outside.txt"
        arguments = {"cmd": _apply_patch_heredoc(str(target))}
    arguments |= {"login": False, "yield_time_ms": 20000}

    def route(request: codex_testing.RecordedRequest) -> codex_testing.Behaviour | None:
        # Codex's automatic approval reviewer ("guardian") asks the same model server.
        if request.headers.get("x-openai-subagent") == "guardian":
            return codex_testing.Reply((codex_testing.MessageItem(verdict),))
        return None

    async with codex_testing.FakeResponsesServer(route=route) as server:
        home = codex_testing.write_codex_home(tmp_path / "home", server.base_url, "mock-model")
        with (home / "config.toml").open("a", encoding="utf-8") as config:
            config.write(
                "\n[sandbox_workspace_write]\nexclude_slash_tmp = true\n"
                "exclude_tmpdir_env_var = true\n"
            )
        server.queue(
            codex_testing.Reply((codex_testing.FunctionCallItem("exec_command", arguments),))
        )
        server.queue(codex_testing.HttpStatus(500, {"error": {"message": "boom"}}))
        provider = CodexProvider(
            CodexProviderConfig(
                env=codex_testing.hermetic_env(home), permission_mode="approve-for-me"
            )
        )
        async with await provider.start(
            codex_testing.make_start_request(ws, "write a file")
        ) as run:
            result = await run.result()
        requests = server.requests
    assert [r.body["model"] for r in requests] == ["mock-model", "codex-auto-review", "mock-model"]
    return (result, requests, target)


@pytest.mark.parametrize("what", ["command", "file"])
async def test_approve_for_me_reviewer_denial_gives_the_two_line_diagnostic(
    tmp_path: Path, what: str
) -> None:
    result, requests, target = await _reviewed_write(tmp_path, what, _DENY)
    assert not target.exists()
    assert list((tmp_path / "ws").iterdir()) == []
    results = [i for i in requests[2].body["input"] if i["type"] == "function_call_output"]
    assert "This action was rejected due to unacceptable risk." in results[-1]["output"]
    assert result.stop_reason is StopReason.ERROR
    line = "Codex unattended decision (mode: approve-for-me; "
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn; category: internalServerError)\n"
        f"{line}{_FACTS[what]} under the selected permission mode"
    )


@pytest.mark.parametrize("what", ["command", "file"])
async def test_approve_for_me_reviewer_allow_runs_the_write(tmp_path: Path, what: str) -> None:
    # The counterpart that keeps the denial test honest: the same write, allowed, happens.
    result, _requests, target = await _reviewed_write(tmp_path, what, _ALLOW)
    assert target.exists()
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn; category: internalServerError)"
    )


@pytest.mark.parametrize(
    ("mode", "sandbox_mode"),
    [
        ("approve-for-me", "workspace-write"),
        ("dangerously-bypass-approvals-and-sandbox", "danger-full-access"),
    ],
)
async def test_permissive_modes_write_inside_the_workspace(
    codex_env: Env, mode: str, sandbox_mode: str
) -> None:
    # login=false skips the slow profile; a long yield time makes the tool wait for the exit.
    command = {"cmd": "echo hi > made.txt", "login": False, "yield_time_ms": 20000}
    codex_env.server.queue_tool_call("exec_command", command)
    codex_env.server.queue_text("written", phase="final_answer")
    provider = codex_env.provider(permission_mode=mode)
    async with await provider.start(codex_env.request("write")) as run:
        result = await run.result()
    assert result.text == "written"
    outputs = [
        item["output"]
        for item in codex_env.server.requests[1].body["input"]
        if item["type"] == "function_call_output"
    ]
    assert "Process exited with code 0" in outputs[-1]
    assert (codex_env.workspace / "made.txt").read_text() == "hi\n"
    assert _metadata_of(codex_env.server, 0)["sandbox_mode"] == sandbox_mode


@pytest.mark.parametrize(
    ("behaviour", "category"),
    [
        (codex_testing.HttpStatus(500, {"error": {"message": CANARY}}), "internalServerError"),
        (
            codex_testing.HttpStatus(503, {"error": {"message": CANARY, "code": "server_error"}}),
            "httpConnectionFailed; HTTP status: 503",
        ),
        (
            codex_testing.HttpStatus(
                400, {"error": {"message": CANARY, "type": "invalid_request_error"}}
            ),
            "other",
        ),
    ],
)
async def test_model_side_failures_map_to_safe_categories(
    codex_env: Env,
    behaviour: codex_testing.HttpStatus,
    category: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG, logger="dsh")
    monkeypatch.setenv("CANARY_SECRET_TOKEN", CANARY)
    monkeypatch.setenv("CANARY_PLAIN", CANARY)
    codex_env.server.queue(behaviour)
    async with await codex_env.provider().start(codex_env.request("t")) as run:
        result = await run.result()
    assert result.stop_reason is StopReason.ERROR
    assert result.diagnostic == (
        f"Product subagent failure (product: Codex; stage: turn; category: {category})"
    )
    assert CANARY not in repr(result)
    for record in caplog.records:
        if record.levelno >= logging.INFO:
            assert CANARY not in record.getMessage()


async def test_context_length_exceeded_is_max_tokens(codex_env: Env) -> None:
    codex_env.server.queue_failed("context_length_exceeded")
    async with await codex_env.provider().start(codex_env.request("t")) as run:
        result = await run.result()
    assert result.stop_reason is StopReason.MAX_TOKENS
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn; category: contextWindowExceeded)"
    )


async def test_app_server_killed_mid_turn_is_process_exit(codex_env: Env) -> None:
    codex_env.server.queue_stall(seconds=30)
    run = await codex_env.provider().start(codex_env.request("t"))
    try:
        await codex_env.server.wait_for_requests(1)
        os.kill(run._proc.pid, signal.SIGKILL)
        result = await asyncio.wait_for(run.result(), 10)
    finally:
        await run.aclose()
    assert result.stop_reason is StopReason.ERROR
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: process; category: process-exit; "
        "signal: SIGKILL)"
    )


def _tids(pid: int) -> list[int]:
    return [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="threads' nice is Linux's")
async def test_under_contention_every_busy_app_server_is_lowered(codex_env: Env) -> None:
    """nice = "auto" with the real product: one run more than the calm count lowers every
    running app-server, each of its threads (Codex is multi-threaded) and its autogroup."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    count = contention.calm + 1
    for _ in range(count):
        codex_env.server.queue_stall(seconds=30)
    runs = []
    try:
        for _ in range(count):
            runs.append(await codex_env.provider().start(codex_env.request("t")))
        await codex_env.server.wait_for_requests(count)

        def thread_nices() -> set[int]:
            return {
                os.getpriority(os.PRIO_PROCESS, tid) for run in runs for tid in _tids(run._proc.pid)
            }

        deadline = asyncio.get_running_loop().time() + 10
        while thread_nices() != {max(own, contention.nice_for(count))}:
            assert asyncio.get_running_loop().time() < deadline, thread_nices()
            await asyncio.sleep(0.05)
        assert len(_tids(runs[0]._proc.pid)) > 1  # threads were there
    finally:
        for run in runs:
            run.cancel()
            await run.aclose()
    assert contention.busy_count() == 0


async def test_cancel_mid_turn_is_aborted_and_leaves_no_process(codex_env: Env) -> None:
    codex_env.server.queue_stall(seconds=30)
    run = await codex_env.provider().start(codex_env.request("t"))
    tree_id = run._proc.tree_id
    await codex_env.server.wait_for_requests(1)
    assert await asyncio.to_thread(marked_processes, tree_id)
    # A lone run (the default nice = "auto") runs at the host's own priority.
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert os.getpriority(os.PRIO_PROCESS, run._proc.pid) == own
    run.cancel()
    result = await run.result()
    assert result.stop_reason is StopReason.ABORTED
    assert result.diagnostic is None
    assert result.output == ()
    await run.aclose()
    assert await asyncio.to_thread(marked_processes, tree_id) == []


@pytest.mark.parametrize("how", ["no-payload", "no-package"])
async def test_missing_payload_fails_safely_and_never_runs_a_host_codex(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    bindir, evidence = decoy_program(tmp_path, "codex")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    if how == "no-payload":
        empty = tmp_path / "empty-package"
        empty.mkdir()
        monkeypatch.setattr(codex_cli_bin, "bundled_package_dir", lambda: empty)
    else:
        monkeypatch.setitem(sys.modules, "codex_cli_bin", None)
    ws = tmp_path / "ws"
    ws.mkdir()
    with pytest.raises(ProductFailure) as info:
        await CodexProvider().start(codex_testing.make_start_request(ws, "task"))
    assert str(info.value) == (
        "subagent-codex: Product subagent failure (product: Codex; stage: initialize; "
        "category: unknown)"
    )
    assert not evidence.exists()


def _conformance_route(request: codex_testing.RecordedRequest) -> codex_testing.Behaviour | None:
    task = request.task or ""
    if task == "fail please":
        return codex_testing.HttpStatus(500, {"error": {"message": "x"}})
    if task == "stall please":
        return codex_testing.Stall((), seconds=20)
    return codex_testing.Reply((codex_testing.MessageItem("conformance answer", "final_answer"),))


async def test_run_provider_conformance(tmp_path: Path) -> None:
    async with codex_testing.FakeResponsesServer(route=_conformance_route) as fake:
        home = codex_testing.write_codex_home(tmp_path / "home", fake.base_url, "mock-model")
        ws = tmp_path / "ws"
        ws.mkdir()

        def make_provider() -> CodexProvider:
            return CodexProvider(
                CodexProviderConfig(env=codex_testing.hermetic_env(home), dispose_grace_ms=2000)
            )

        async def after_each() -> None:
            assert await asyncio.to_thread(marked_processes, owner_pid=os.getpid()) == []

        report = await run_provider_conformance(
            make_provider,
            make_request=lambda: codex_testing.make_start_request(ws, "answer please"),
            make_failing_request=lambda: codex_testing.make_start_request(ws, "fail please"),
            make_long_request=lambda: codex_testing.make_start_request(ws, "stall please"),
            after_each=after_each,
        )
    assert "reports_activity" in report.passed


async def test_dropped_stream_is_other_and_unphased_answer_is_used(codex_env: Env) -> None:
    codex_env.server.queue(codex_testing.Drop((codex_testing.MessageItem("partial"),)))
    async with await codex_env.provider().start(codex_env.request("t")) as run:
        result = await run.result()
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn; category: other)"
    )
    codex_env.server.queue(
        codex_testing.Reply(
            (codex_testing.MessageItem("first"), codex_testing.MessageItem("second"))
        )
    )
    async with await codex_env.provider().start(codex_env.request("t")) as run:
        assert (await run.result()).text == "second"
