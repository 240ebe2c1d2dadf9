"""Wire-level branches the real product cannot produce, driven through a scripted stand-in."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent import ProductFailure, StopReason, SubagentResult, TextBlock
from dsh.subagent_codex import CodexProvider, CodexProviderConfig
from dsh.subagent_codex._mapping import OBJECT_VARIANTS, STRING_VARIANTS
from dsh.subagent_codex.testing import make_start_request, provider_with_program

STANDIN = Path(__file__).with_name("standin_app_server.py")
CANARY = "SECRET-CANARY"


def standin(
    tmp_path: Path,
    scenario: str,
    arg: str = "",
    *,
    max_line: int = 1 << 20,
    stderr: str = "discard",
    mode: str = "never",
    then: str = "",
) -> tuple[CodexProvider, Path]:
    log = tmp_path / "standin.log"
    log.unlink(missing_ok=True)
    env = {
        "STANDIN_SCENARIO": scenario,
        "STANDIN_ARG": arg,
        "STANDIN_LOG": str(log),
        "STANDIN_THEN": then,
    }
    config = CodexProviderConfig(
        env=env,
        stderr=stderr,
        dispose_grace_ms=2000,
        permission_mode=mode,
    )
    provider = provider_with_program(
        config, [sys.executable, str(STANDIN)], max_line_bytes=max_line
    )
    return provider, log


async def run_once(tmp_path: Path, scenario: str, arg: str = "", **kw: Any) -> SubagentResult:
    provider, _ = standin(tmp_path, scenario, arg, **kw)
    async with await provider.start(make_start_request(tmp_path, "task")) as run:
        return await run.result()


def replies(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


async def _refused(
    tmp_path: Path, scenario: str, arg: str = ""
) -> tuple[SubagentResult, dict[str, Any]]:
    """A run whose stand-in sends a server request the provider must refuse: the run failed;
    its result and the provider's one reply to that request (id 0)."""
    provider, log = standin(tmp_path, scenario, arg)
    async with await provider.start(make_start_request(tmp_path, "task")) as run:
        result = await run.result()
    assert result.stop_reason is StopReason.ERROR
    (reply,) = [r for r in replies(log) if r.get("id") == 0]
    return result, reply


def line(stage: str, category: str, extra: str = "") -> str:
    return f"Product subagent failure (product: Codex; stage: {stage}; category: {category}{extra})"


#: The failure line the stand-in's ``STANDIN_THEN=fail`` terminal produces.
FAILED_TURN = line("turn", "internalServerError")
NO_APPROVAL = "the provider does not grant interactive approval"


def unattended(request: str, decision: str, reason: str, mode: str = "never") -> str:
    """The exact fact line codex.md fixes for an unattended answer."""
    return (
        f"Codex unattended decision (mode: {mode}; request: {request}; decision: {decision}): "
        f"{reason}"
    )


async def answer_then(
    tmp_path: Path, scenario: str, arg: str, then: str, mode: str = "never"
) -> tuple[SubagentResult, dict[str, Any]]:
    """Run one turn where the stand-in sends a server request; return the result and our reply."""
    provider, log = standin(tmp_path, scenario, arg, then=then, mode=mode)
    async with await provider.start(make_start_request(tmp_path, "task")) as run:
        result = await run.result()
    (reply,) = [r for r in replies(log) if r.get("id") == 0]
    return result, reply


async def test_early_turn_frames_are_buffered_and_replayed(tmp_path: Path) -> None:
    result = await run_once(tmp_path, "early")
    assert result.stop_reason is StopReason.COMPLETED
    assert result.text == "early answer"


async def test_handshake_fields(tmp_path: Path) -> None:
    provider, log = standin(tmp_path, "select", json.dumps([["a", None]]), mode="approve-for-me")
    async with await provider.start(make_start_request(tmp_path, "one", "two")) as run:
        assert (await run.result()).text == "a"
    entries = replies(log)
    init = entries[0]["initialize"]
    assert isinstance(init["id"], str)
    assert init["id"].startswith("dsh-")
    params = init["params"]
    assert params["clientInfo"]["name"] == "dsh"
    assert params["capabilities"]["experimentalApi"] is False
    # The streaming deltas stay on: they move the run's activity stamp (the stall limit); the
    # token usage and the rate limits stay on: they are the run's usage facts.
    assert params["capabilities"]["optOutNotificationMethods"] == []
    thread = entries[1]["thread/start"]["params"]
    assert thread == {
        "cwd": str(tmp_path),
        "ephemeral": True,
        "approvalPolicy": "on-request",
        "approvalsReviewer": "auto_review",
        "sandbox": "workspace-write",
        "config": {"shell_environment_policy.exclude": ["CODEX_API_KEY", "OPENAI_API_KEY"]},
    }


async def test_malformed_non_object_and_foreign_frames_are_ignored(tmp_path: Path) -> None:
    result = await run_once(tmp_path, "malformed")
    assert result.stop_reason is StopReason.COMPLETED
    assert result.text == "the answer"


async def test_oversized_line_fails_the_run(tmp_path: Path) -> None:
    result = await run_once(tmp_path, "oversized", "5000", max_line=1024)
    assert result.stop_reason is StopReason.ERROR
    assert result.diagnostic == line("turn", "unknown")


async def test_conflicting_early_turn_id_fails(tmp_path: Path) -> None:
    result = await run_once(tmp_path, "conflict")
    assert result.stop_reason is StopReason.ERROR
    assert result.diagnostic == line("turn-start", "unknown")


async def test_response_turn_id_differing_from_buffered_fails(tmp_path: Path) -> None:
    result = await run_once(tmp_path, "mismatch")
    assert result.diagnostic == line("turn-start", "unknown")


async def test_turn_start_without_turn_id_fails(tmp_path: Path) -> None:
    result = await run_once(tmp_path, "no_turn_id")
    assert result.diagnostic == line("turn-start", "unknown")


@pytest.mark.parametrize("phase", ["weird", "FINAL_ANSWER"])
async def test_unknown_phase_fails(tmp_path: Path, phase: str) -> None:
    result = await run_once(tmp_path, "phase", phase)
    assert result.stop_reason is StopReason.ERROR
    assert result.diagnostic == line("turn", "unknown")


async def test_rate_limits_without_thread_or_turn_are_read(tmp_path: Path) -> None:
    # Codex's account/rateLimits/updated names no thread or turn; it is the run's all the same.
    provider, _ = standin(tmp_path, "rate_limits")
    async with await provider.start(make_start_request(tmp_path, "task")) as run:
        result = await run.result()
    assert result.text == "limited"
    assert run.usage is not None
    assert run.usage.rate_limit_used_percent == 43.0
    assert run.usage.rate_limit_window_minutes == 300
    assert run.usage.rate_limit_resets_at == 1900000000


async def test_missing_phase_key_fails(tmp_path: Path) -> None:
    result = await run_once(tmp_path, "missing_phase")
    assert result.diagnostic == line("turn", "unknown")


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        ([["u1", None], ["f1", "final_answer"], ["u2", None], ["c", "commentary"]], "f1"),
        ([["f1", "final_answer"], ["f2", "final_answer"], ["p", "partial_answer"]], "f2"),
        ([["u1", None], ["u2 ", None], ["c", "commentary"]], "u2 "),
        ([["u1", None], ["  ", "final_answer"]], None),
        ([["c", "commentary"], ["p", "partial_answer"]], None),
        ([], None),
    ],
)
async def test_answer_selection(
    tmp_path: Path, items: list[list[Any]], expected: str | None
) -> None:
    result = await run_once(tmp_path, "select", json.dumps(items))
    if expected is None:
        assert result.stop_reason is StopReason.ERROR
        assert (
            result.diagnostic
            == line("turn", "unknown") + "\nCodex completed without a final answer"
        )
    else:
        assert result.stop_reason is StopReason.COMPLETED
        assert result.output == (TextBlock(expected),)


@pytest.mark.parametrize("variant", sorted(STRING_VARIANTS))
async def test_every_string_variant(tmp_path: Path, variant: str) -> None:
    result = await run_once(tmp_path, "errinfo", json.dumps(variant))
    if variant == "contextWindowExceeded":
        assert result.stop_reason is StopReason.MAX_TOKENS
    else:
        assert result.stop_reason is StopReason.ERROR
    # The final answer completed before the failure is kept as partial output on every variant.
    assert result.output == (TextBlock("partial text"),)
    expected = line("turn", variant)
    if variant == "sandboxError":
        expected += (
            "\nCodex unattended decision (mode: never; request: sandbox execution; decision: "
            "failed): Codex reported a sandbox failure"
        )
    assert result.diagnostic == expected
    assert CANARY not in (result.diagnostic or "")


@pytest.mark.parametrize("variant", sorted(OBJECT_VARIANTS))
@pytest.mark.parametrize("status", [503, None, 70000, -1, "503", True])
async def test_every_object_variant(tmp_path: Path, variant: str, status: object) -> None:
    body = {"httpStatusCode": status} if variant != "activeTurnNotSteerable" else {"turnKind": "x"}
    result = await run_once(tmp_path, "errinfo", json.dumps({variant: body}))
    keeps = variant != "activeTurnNotSteerable" and status == 503
    assert result.stop_reason is StopReason.ERROR
    assert result.diagnostic == line("turn", variant, "; HTTP status: 503" if keeps else "")


@pytest.mark.parametrize(
    "info",
    [
        "brandNewCode",
        {"brandNewKey": {}},
        {"httpConnectionFailed": {}, "other": {}},
        {"httpConnectionFailed": None},
        {"httpConnectionFailed": 503},
        None,
        [],
        7,
    ],
)
async def test_malformed_error_info_is_unknown(tmp_path: Path, info: object) -> None:
    result = await run_once(tmp_path, "errinfo", json.dumps(info))
    assert result.stop_reason is StopReason.ERROR
    assert result.diagnostic == line("turn", "unknown")


async def test_missing_error_info_and_odd_statuses(tmp_path: Path) -> None:
    assert (await run_once(tmp_path, "errinfo_missing")).diagnostic == line("turn", "unknown")
    for status in ("interrupted", "inProgress", "bogus"):
        result = await run_once(tmp_path, "status", status)
        assert result.stop_reason is StopReason.ERROR
        assert result.diagnostic == line("turn", "unknown")


@pytest.mark.parametrize(
    ("offered", "decision", "fact"),
    [
        ('["accept", "cancel"]', "cancel", "cancelled"),
        ('["accept", "decline"]', "decline", "declined"),
        ('["decline", "cancel"]', "cancel", "cancelled"),
        ("absent", "decline", "declined"),
        ("null", "decline", "declined"),
    ],
)
async def test_available_decisions(tmp_path: Path, offered: str, decision: str, fact: str) -> None:
    provider, log = standin(tmp_path, "approval", offered)
    async with await provider.start(make_start_request(tmp_path, "task")) as run:
        result = await run.result()
    assert result.stop_reason is StopReason.COMPLETED
    (reply,) = [r for r in replies(log) if r.get("id") == 0]
    assert reply["result"] == {"decision": decision}
    assert fact  # the fact is dropped on success; see the failing variant below
    assert result.diagnostic is None
    assert result.text == "after approval"
    # The same request followed by a failed turn: the fact is the diagnostic's second line.
    failed, reply = await answer_then(tmp_path, "approval", offered, "fail")
    assert reply["result"] == {"decision": decision}
    assert failed.stop_reason is StopReason.ERROR
    assert failed.output == ()
    assert failed.diagnostic == (
        FAILED_TURN + "\n" + unattended("command approval", fact, NO_APPROVAL)
    )


@pytest.mark.parametrize("offered", ['["accept"]', "[]", '"cancel"'])
async def test_other_decision_lists_get_an_error_and_fail(tmp_path: Path, offered: str) -> None:
    result, reply = await _refused(tmp_path, "approval", offered)
    assert result.diagnostic == line("turn", "unknown")
    assert reply["error"]["code"] == -32603


@pytest.mark.parametrize(
    ("method", "answer", "fact"),
    [
        (
            "item/permissions/requestApproval",
            {"permissions": {}, "scope": "turn"},
            unattended(
                "permission grant", "denied", "the provider grants no additional turn permissions"
            ),
        ),
        (
            "item/tool/requestUserInput",
            {"answers": {}},
            unattended(
                "user input", "empty response", "the provider does not collect interactive answers"
            ),
        ),
        (
            "mcpServer/elicitation/request",
            {"action": "decline", "content": None, "_meta": None},
            unattended(
                "MCP elicitation", "declined", "the provider does not collect interactive MCP input"
            ),
        ),
        (
            "item/fileChange/requestApproval",
            {"decision": "decline"},
            unattended("file approval", "declined", NO_APPROVAL),
        ),
        (
            "item/commandExecution/requestApproval",
            {"decision": "decline"},
            unattended("command approval", "declined", NO_APPROVAL),
        ),
    ],
)
async def test_fixed_answers(
    tmp_path: Path, method: str, answer: dict[str, Any], fact: str
) -> None:
    provider, log = standin(tmp_path, "fixed_request", method)
    async with await provider.start(make_start_request(tmp_path, "task")) as run:
        result = await run.result()
        assert result.text == "after request"
    (reply,) = [r for r in replies(log) if r.get("id") == 0]
    assert reply["result"] == answer
    # Success drops the fact.
    assert result.stop_reason is StopReason.COMPLETED
    assert result.diagnostic is None
    # A failed turn after the same request: exactly the failure line, then the fact line.
    failed, reply = await answer_then(tmp_path, "fixed_request", method, "fail")
    assert reply["result"] == answer
    assert failed.stop_reason is StopReason.ERROR
    assert failed.diagnostic == FAILED_TURN + "\n" + fact
    # The mode is named in the fact as configured.
    failed, _ = await answer_then(tmp_path, "fixed_request", method, "fail", mode="approve-for-me")
    assert failed.diagnostic == FAILED_TURN + "\n" + fact.replace(
        "mode: never", "mode: approve-for-me"
    )


@pytest.mark.parametrize("method", ["item/tool/call", "account/chatgptAuthTokens/refresh"])
async def test_unknown_server_request_gets_32603_and_fails(tmp_path: Path, method: str) -> None:
    result, reply = await _refused(tmp_path, "unknown_request", method)
    assert result.diagnostic == line("turn", "unknown")
    assert reply["error"] == {
        "code": -32603,
        "message": f'unsupported app-server request "{method}"',
    }


async def test_misassociated_request_gets_32603_and_fails(tmp_path: Path) -> None:
    _, reply = await _refused(tmp_path, "misassociated")
    assert reply["error"]["code"] == -32603


async def test_latest_fact_follows_the_failure_line(tmp_path: Path) -> None:
    result = await run_once(tmp_path, "declined_then_fail")
    assert result.diagnostic == (
        line("turn", "internalServerError")
        + "\nCodex unattended decision (mode: never; request: command execution; decision: "
        "declined): Codex declined the command under the selected permission mode"
    )


async def test_cancelling_the_approval_under_failure_keeps_the_fact(tmp_path: Path) -> None:
    provider, _ = standin(tmp_path, "approval", '["cancel"]')
    async with await provider.start(make_start_request(tmp_path, "task")) as run:
        result = await run.result()
        assert result.stop_reason is StopReason.COMPLETED
    assert result.diagnostic is None  # success drops the fact
    failed, reply = await answer_then(tmp_path, "approval", '["cancel"]', "fail")
    assert reply["result"] == {"decision": "cancel"}
    assert failed.stop_reason is StopReason.ERROR
    assert failed.diagnostic == (
        FAILED_TURN + "\n" + unattended("command approval", "cancelled", NO_APPROVAL)
    )


async def test_exit_mid_turn_reports_process_exit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="dsh")
    result = await run_once(tmp_path, "exit", "3", stderr="forward")
    assert result.stop_reason is StopReason.ERROR
    assert result.diagnostic == line("process", "process-exit", "; exit code: 3")
    for record in caplog.records:
        if record.levelno >= logging.INFO:
            assert CANARY not in record.getMessage()


async def test_completed_then_nonzero_exit_stays_completed(tmp_path: Path) -> None:
    result = await run_once(tmp_path, "completed_then_exit")
    assert result.stop_reason is StopReason.COMPLETED
    assert result.text == "queued answer"


async def test_stderr_flood_neither_stalls_nor_grows_memory(tmp_path: Path) -> None:
    for stderr in ("discard", "forward"):
        tracemalloc.start()
        started = time.monotonic()
        result = await run_once(tmp_path, "flood", stderr=stderr)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert result.text == "flood answer"
        assert time.monotonic() - started < 10
        assert peak < 8 * 1024 * 1024


async def _until(predicate: Any) -> None:
    for _ in range(1000):  # bounded test-side wait: at most about 10 s
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached in time")


async def test_cancel_sends_a_bounded_interrupt(tmp_path: Path) -> None:
    provider, log = standin(tmp_path, "hang")
    run = await provider.start(make_start_request(tmp_path, "task"))
    await _until(lambda: run._turn_id is not None)  # interrupt needs both ids
    run.cancel()
    result = await run.result()
    assert result.stop_reason is StopReason.ABORTED
    assert result.diagnostic is None
    await _until(lambda: any(r.get("method") == "turn/interrupt" for r in replies(log)))
    started = time.monotonic()
    await run.aclose()
    assert time.monotonic() - started < 5


async def test_handshake_failure_rolls_back_with_safe_line(tmp_path: Path) -> None:
    provider = CodexProvider(
        CodexProviderConfig(stderr="discard"),
        _program=[sys.executable, "-c", "import sys; sys.exit(5)"],
    )
    with pytest.raises(ProductFailure) as info:
        await provider.start(make_start_request(tmp_path, "task"))
    # The exit interrupted the handshake, so it keeps the start-up stage and its exit code.
    assert str(info.value) == "subagent-codex: " + line(
        "initialize", "process-exit", "; exit code: 5"
    )


async def test_canaries_never_reach_results_messages_or_info_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="dsh")
    monkeypatch.setenv("CANARY_API_TOKEN", CANARY)
    monkeypatch.setenv("CANARY_PLAIN_VALUE", CANARY)
    seen: list[str] = []
    # stderr canary + exit during the handshake: a startup failure message
    provider = CodexProvider(
        CodexProviderConfig(stderr="forward", env={"X": CANARY}),
        _program=[sys.executable, "-c", f"import sys; sys.stderr.write('{CANARY}'); sys.exit(2)"],
    )
    with pytest.raises(ProductFailure) as info:
        await provider.start(make_start_request(tmp_path, f"task {CANARY}"))
    seen.append(str(info.value))
    # error-info message carrying a canary, plus product stderr, after publication
    for scenario, arg in (("errinfo", '"other"'), ("exit", "9")):
        result = await run_once(tmp_path, scenario, arg, stderr="forward")
        seen += [repr(result), result.diagnostic or ""]
    for text in seen:
        assert CANARY not in text
    for record in caplog.records:
        if record.levelno >= logging.INFO:
            assert CANARY not in record.getMessage()


@pytest.mark.parametrize(
    ("scenario", "stage"),
    [
        ("init_bad", "initialize"),
        ("init_error", "initialize"),
        ("thread_not_ephemeral", "thread-start"),
        ("thread_no_id", "thread-start"),
        ("thread_error", "thread-start"),
    ],
)
async def test_handshake_rejections_raise_the_safe_stage_line(
    tmp_path: Path, scenario: str, stage: str
) -> None:
    provider, _ = standin(tmp_path, scenario)
    with pytest.raises(ProductFailure) as info:
        await provider.start(make_start_request(tmp_path, "task"))
    assert str(info.value) == f"subagent-codex: {line(stage, 'unknown')}"
    assert info.value.__cause__ is not None


@pytest.mark.parametrize("mode", ["forward", "discard"])
async def test_stderr_is_forwarded_byte_exact_or_discarded(
    tmp_path: Path, mode: str, capfd: pytest.CaptureFixture[str]
) -> None:
    result = await run_once(tmp_path, "exit", "0", stderr=mode)
    assert result.diagnostic == line("process", "process-exit", "; exit code: 0")
    err = capfd.readouterr().err
    assert ("stderr SECRET-CANARY\n" in err) is (mode == "forward")


async def test_non_ascii_task_text_is_sent_safely(tmp_path: Path) -> None:
    # A lone surrogate never gets this far: the pre-spawn check rejects it (the real Codex drops
    # such a turn/start unanswered; see test_real_product.py).
    provider, _ = standin(tmp_path, "select", json.dumps([["ok", None]]))
    async with await provider.start(make_start_request(tmp_path, "ünï — \U0001f600 x")) as run:
        assert (await run.result()).text == "ok"
