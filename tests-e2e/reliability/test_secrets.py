"""Secrets: canaries never reach a result, a diagnostic, an exception message or an INFO+ log.

Canaries are placed, for each real product, in the parent env (``CANARY_TOKEN``, credential-named,
so the scrub removes it), in a non-credential name passed explicitly through ``env`` (it reaches
the product and its tool, and is echoed to the tool's stderr), in the model name (the product
prints it on its own stderr, which is forwarded to ours), in the tool-call arguments, and in the
model's HTTP error body. Only the model itself may see what the tool printed.
"""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent import ProductFailure, StopReason, SubagentResult
from dsh.subagent_codex.testing import FunctionCallItem, HttpStatus, Reply, write_codex_home

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(120)]

PLAIN_NAME = "RELIABILITY_PLAIN_VALUE"


def canaries() -> dict[str, str]:
    return {
        where: f"CANARY-{where}-{uuid.uuid4().hex}"
        for where in ("parent", "plain", "stderr", "tool", "body", "config")
    }


def tool_command(marks: dict[str, str]) -> str:
    return (
        f'echo {marks["tool"]} >&2; echo "${PLAIN_NAME}" >&2; '
        'echo "token=${CANARY_TOKEN:-unset}"; exit 3'
    )


def assert_clean(
    marks: dict[str, str],
    texts: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    for text in texts:
        for where, mark in marks.items():
            assert mark not in text, f"the {where} canary leaked into {text!r}"
    formatter = logging.Formatter()
    for record in caplog.records:
        if record.levelno < logging.INFO:
            continue
        shown = record.getMessage()
        if record.exc_info:
            shown += formatter.formatException(record.exc_info)
        for where, mark in marks.items():
            assert mark not in shown, f"the {where} canary leaked into an INFO+ log record"


def result_texts(result: SubagentResult) -> list[str]:
    return [result.text, result.diagnostic or "", repr(result)]


def failure_texts(error: BaseException) -> list[str]:
    texts = [str(error), repr(error)]
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            texts += [str(inner), repr(inner)]
    return texts


async def test_codex_canaries_stay_out_of_everything_the_parent_sees(
    kit: Any,
    codex: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    marks = canaries()
    monkeypatch.setenv("CANARY_TOKEN", marks["parent"])
    call = {"cmd": tool_command(marks), "login": False, "yield_time_ms": 10_000}
    codex.server.queue(Reply((FunctionCallItem("exec_command", call),)))
    codex.server.queue(HttpStatus(500, {"error": {"message": marks["body"], "type": "x"}}))
    provider = codex.provider(
        model=f"mock-{marks['stderr']}",
        permission_mode="dangerously-bypass-approvals-and-sandbox",
        stderr="forward",
        env={PLAIN_NAME: marks["plain"], "RUST_LOG": "info"},
    )
    async with await provider.start(codex.request(f"task {marks['tool']}")) as run:
        result = await run.result()
    assert result.stop_reason is StopReason.ERROR
    assert result.diagnostic == (
        "Product subagent failure (product: Codex; stage: turn; category: internalServerError)"
    )
    # A start failure whose raw cause carries a canary: an unknown model provider in config.
    broken = write_codex_home(tmp_path / "broken-home", codex.server.base_url, "mock-model")
    config = (broken / "config.toml").read_text()
    (broken / "config.toml").write_text(
        config.replace('model_provider = "mock"', f"model_provider = {json.dumps(marks['config'])}")
    )
    # A key is forwarded, so the account check passes (an unknown provider falls back to the
    # built-in one's auth) and the failure comes from ``thread/start``, whose reply names it.
    keyed = kit.codex_provider(broken, env={"OPENAI_API_KEY": "sk-dsh-broken-home-0000"})
    with pytest.raises((ProductFailure, ExceptionGroup)) as caught:
        await keyed.start(codex.request("task two"))
    assert kit.is_safe_failure_message(str(caught.value)), str(caught.value)
    # The raw cause (kept on ``__cause__`` only) did carry the canary.
    assert marks["config"] in str(getattr(caught.value.__cause__, "raw_message", ""))
    # Where the canaries really went: to the product, its tool and its own stderr.
    forwarded = capfd.readouterr().err
    assert marks["stderr"] in forwarded, "Codex did print the model-name canary on its stderr"
    second = json.dumps(codex.server.requests[1].body)
    assert marks["plain"] in second, "the explicit env value reached the tool"
    assert "token=unset" in second, "the credential-named parent value was scrubbed"
    assert all(marks["parent"].encode() not in r.raw_body for r in codex.server.requests)
    assert_clean(marks, [*result_texts(result), *failure_texts(caught.value)], caplog)


async def test_claude_code_canaries_stay_out_of_everything_the_parent_sees(
    kit: Any,
    claude: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    marks = canaries()
    monkeypatch.setenv("CANARY_TOKEN", marks["parent"])
    command = tool_command(marks)
    claude.server.queue_tool_call("Bash", {"command": command, "description": marks["tool"]})
    claude.server.queue_http_error(500, marks["body"])
    provider = claude.provider(
        model=f"claude-{marks['stderr']}",
        permission_mode="bypassPermissions",
        stderr="forward",
        env={PLAIN_NAME: marks["plain"], "IS_SANDBOX": "1"},
    )
    async with await provider.start(claude.request(f"task {marks['tool']}")) as run:
        result = await run.result()
    assert result.stop_reason is StopReason.ERROR
    assert result.diagnostic == (
        "Product subagent failure (product: Claude Code; stage: query-run; category: server; "
        "HTTP status: 500; exit code: 1)"
    )
    # A start failure: the root refusal of bypassPermissions without IS_SANDBOX.
    refusing = claude.provider(
        model=f"claude-{marks['stderr']}",
        permission_mode="bypassPermissions",
        stderr="forward",
        env={PLAIN_NAME: marks["plain"], "ANTHROPIC_MODEL": marks["config"]},
    )
    with pytest.raises((ProductFailure, ExceptionGroup)) as caught:
        await refusing.start(claude.request("task two"))
    assert kit.is_safe_failure_message(str(caught.value)), str(caught.value)
    forwarded = capfd.readouterr().err
    assert marks["stderr"] in forwarded, "the CLI did print the model-name canary on its stderr"
    tool_result = json.dumps(claude.server.requests[1].body)
    assert marks["plain"] in tool_result, "the explicit env value reached the tool"
    assert "token=unset" in tool_result, "the credential-named parent value was scrubbed"
    assert all(marks["parent"].encode() not in r.raw_body for r in claude.server.requests)
    assert_clean(marks, [*result_texts(result), *failure_texts(caught.value)], caplog)
