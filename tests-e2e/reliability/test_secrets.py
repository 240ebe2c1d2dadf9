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
from dataclasses import dataclass
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


@dataclass
class Seen:
    """This test's canaries (one in the parent's credential-named ``CANARY_TOKEN``), every log
    record and the process's own stderr."""

    marks: dict[str, str]
    caplog: pytest.LogCaptureFixture
    capfd: pytest.CaptureFixture[str]


@pytest.fixture
def seen(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> Seen:
    caplog.set_level(logging.DEBUG)
    found = canaries()
    monkeypatch.setenv("CANARY_TOKEN", found["parent"])
    return Seen(found, caplog, capfd)


def _assert_canaries_only_where_due(
    marks: dict[str, str],
    server: Any,
    shown: list[SubagentResult | BaseException],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The tool got the explicit env value but not the scrubbed parent one, no model request
    carried the parent's canary, and nothing the parent was shown (``shown``: results and
    failures) or logged at INFO+ holds any canary."""
    tool_result = json.dumps(server.requests[1].body)
    assert marks["plain"] in tool_result, "the explicit env value reached the tool"
    assert "token=unset" in tool_result, "the credential-named parent value was scrubbed"
    assert all(marks["parent"].encode() not in r.raw_body for r in server.requests)
    texts = [
        text
        for item in shown
        for text in (
            result_texts(item) if isinstance(item, SubagentResult) else failure_texts(item)
        )
    ]
    assert_clean(marks, texts, caplog)


#: Per product: its model-name prefix, the mode that runs its tools unasked, its own env.
UNASKED = {
    "codex": ("mock", "dangerously-bypass-approvals-and-sandbox", {"RUST_LOG": "info"}),
    "claude": ("claude", "bypassPermissions", {"IS_SANDBOX": "1"}),
}


async def _failed_run(
    product: Any, marks: dict[str, str], model: str, mode: str, env: dict[str, str]
) -> SubagentResult:
    """A run of the product's provider (its stderr forwarded, the stderr canary in its model
    name, the plain canary in its tool's env) on a task that names the tool canary; it must
    fail."""
    provider = product.provider(
        model=f"{model}-{marks['stderr']}",
        permission_mode=mode,
        stderr="forward",
        env={PLAIN_NAME: marks["plain"], **env},
    )
    async with await provider.start(product.request(f"task {marks['tool']}")) as run:
        result: SubagentResult = await run.result()
    assert result.stop_reason is StopReason.ERROR
    return result


async def _refused_start(kit: Any, provider: Any, request: Any) -> BaseException:
    """A start that must fail; what it raised, whose message is a safe failure message."""
    with pytest.raises((ProductFailure, ExceptionGroup)) as caught:
        await provider.start(request)
    assert kit.is_safe_failure_message(str(caught.value)), str(caught.value)
    return caught.value


async def test_codex_canaries_stay_out_of_everything_the_parent_sees(
    kit: Any,
    codex: Any,
    tmp_path: Path,
    seen: Seen,
) -> None:
    marks = seen.marks
    call = {"cmd": tool_command(marks), "login": False, "yield_time_ms": 10_000}
    codex.server.queue(Reply((FunctionCallItem("exec_command", call),)))
    codex.server.queue(HttpStatus(500, {"error": {"message": marks["body"], "type": "x"}}))
    result = await _failed_run(codex, marks, *UNASKED["codex"])
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
    failure = await _refused_start(kit, keyed, codex.request("task two"))
    # The raw cause (kept on ``__cause__`` only) did carry the canary.
    assert marks["config"] in str(getattr(failure.__cause__, "raw_message", ""))
    # Where the canaries really went: to the product, its tool and its own stderr.
    assert marks["stderr"] in seen.capfd.readouterr().err, "Codex printed the model-name canary"
    _assert_canaries_only_where_due(marks, codex.server, [result, failure], seen.caplog)


async def test_claude_code_canaries_stay_out_of_everything_the_parent_sees(
    kit: Any,
    claude: Any,
    seen: Seen,
) -> None:
    marks = seen.marks
    command = tool_command(marks)
    claude.server.queue_tool_call("Bash", {"command": command, "description": marks["tool"]})
    claude.server.queue_http_error(500, marks["body"])
    result = await _failed_run(claude, marks, *UNASKED["claude"])
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
    failure = await _refused_start(kit, refusing, claude.request("task two"))
    assert marks["stderr"] in seen.capfd.readouterr().err, "the CLI printed the model-name canary"
    _assert_canaries_only_where_due(marks, claude.server, [result, failure], seen.caplog)
