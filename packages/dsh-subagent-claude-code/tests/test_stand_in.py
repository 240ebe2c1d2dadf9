"""Protocol branches the real CLI cannot be made to produce, via a scripted stand-in program."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent import ProductFailure, StopReason
from dsh.subagent_claude_code import ClaudeCodeProviderConfig
from dsh.subagent_claude_code import _transport as transport_module
from dsh.subagent_claude_code.testing import provider_with_program
from dsh.subprocess import ManagedProcess, SpawnSpec, SubprocessRuntime, TeardownError

SCRIPT = Path(__file__).parent / "stand_ins" / "scripted_cli.py"
LINE = "Product subagent failure (product: Claude Code; stage: query-run; category: {})"
#: The stand-in exits 1 after an error result, as the real CLI does; the exit is kept as a fact.
EXIT_1 = "; exit code: 1)"


def _provider(tmp_path: Path, scenario: str, **fields: Any) -> Any:
    env = {"STANDIN_SCENARIO": scenario, "STANDIN_LOG": str(tmp_path / "log.jsonl")}
    env.update(fields.pop("env", {}))
    config = ClaudeCodeProviderConfig(env=env, **fields)
    return provider_with_program(config, [sys.executable, str(SCRIPT)])


def _log(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]


async def test_elicitation_declined_and_dialog_cancelled(tmp_path: Path, make_request: Any) -> None:
    run = await _provider(tmp_path, "elicitation-dialog").start(make_request("ab", tmp_path))
    result = await run.result()
    await run.aclose()
    entries = _log(tmp_path)
    assert entries[0] == {"prompt": "ab"}
    assert entries[1]["response"]["response"] == {"action": "decline"}
    assert entries[1]["response"]["request_id"] == "e1"
    assert entries[2]["response"]["response"] == {"behavior": "cancelled"}
    assert result.diagnostic == (
        LINE.format("execution")[:-1]
        + EXIT_1
        + "\nClaude Code unattended decision (mode: dontAsk; request: "
        "user dialog; decision: cancelled): the provider does not render blocking dialogs"
    )


@pytest.mark.parametrize("mode", ["dontAsk", "acceptEdits", "auto", "plan"])
async def test_elicitation_declined_fact_on_its_own(
    tmp_path: Path, make_request: Any, mode: str
) -> None:
    provider = _provider(tmp_path, "elicitation-only", permission_mode=mode)
    run = await provider.start(make_request("ab", tmp_path))
    result = await run.result()
    await run.aclose()
    entries = _log(tmp_path)
    assert entries[0] == {"prompt": "ab"}
    assert entries[1]["response"]["request_id"] == "e1"
    assert entries[1]["response"]["response"] == {"action": "decline"}
    assert len(entries) == 2
    assert result.stop_reason == StopReason.ERROR
    assert result.diagnostic == (
        LINE.format("execution")[:-1]
        + EXIT_1
        + f"\nClaude Code unattended decision (mode: {mode}; request: "
        "MCP elicitation; decision: declined): the provider does not collect interactive MCP input"
    )


async def test_elicitation_fact_is_dropped_on_success(tmp_path: Path, make_request: Any) -> None:
    run = await _provider(tmp_path, "elicitation-then-success").start(make_request("ab", tmp_path))
    result = await run.result()
    await run.aclose()
    assert _log(tmp_path)[1]["response"]["response"] == {"action": "decline"}
    assert result.stop_reason == StopReason.COMPLETED
    assert result.text == "after the elicitation"
    assert result.diagnostic is None


@pytest.mark.parametrize(
    ("scenario", "category"),
    [
        ("blank", "invalid-success"),
        ("no-result", "missing-result"),
        ("success-then-error", "budget-limit" + EXIT_1[:-1]),
        # A result did arrive, so an exit after it is not process-exit ("before any result").
        ("success-then-exit", "unknown; exit code: 3"),
        ("error-then-signal", "turn-limit; signal: SIGKILL"),
    ],
)
async def test_result_mapping_branches(
    tmp_path: Path, make_request: Any, scenario: str, category: str
) -> None:
    run = await _provider(tmp_path, scenario).start(make_request("task", tmp_path))
    result = await run.result()
    await run.aclose()
    assert result.stop_reason == StopReason.ERROR
    assert result.output == ()
    assert result.diagnostic == LINE.format(category)


async def test_undecodable_frame_is_unknown_and_never_logged(
    tmp_path: Path, make_request: Any, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "CANARY-frame-5521"
    run = await _provider(tmp_path, "bad-frame", env={"STANDIN_SECRET": secret}).start(
        make_request("task", tmp_path)
    )
    result = await run.result()
    await run.aclose()
    assert result.diagnostic == LINE.format("unknown")
    for record in caplog.records:
        if record.levelno >= logging.INFO:
            assert secret not in record.getMessage()


@pytest.mark.parametrize("scenario", ["oversized-result", "endless-line"])
async def test_a_stdout_line_over_the_bound_fails_the_run(
    tmp_path: Path, make_request: Any, monkeypatch: pytest.MonkeyPatch, scenario: str
) -> None:
    # The shared BoundedLines rule: a line over the bound fails the run whether it is complete
    # (even a valid result frame) or still pending.
    monkeypatch.setattr(transport_module, "MAX_LINE_BYTES", 1024)
    run = await _provider(tmp_path, scenario).start(make_request("task", tmp_path))
    result = await run.result()
    await run.aclose()
    assert result.stop_reason == StopReason.ERROR
    assert result.diagnostic is not None
    assert result.diagnostic.startswith(LINE.format("unknown")[:-1])


async def test_stream_that_does_not_end_keeps_the_last_success(
    tmp_path: Path, make_request: Any
) -> None:
    provider = _provider(tmp_path, "late-results", dispose_grace_ms=300)
    began = time.monotonic()
    run = await provider.start(make_request("task", tmp_path))
    result = await run.result()
    await run.aclose()
    assert result.stop_reason == StopReason.COMPLETED
    assert result.text == "FIRST-SUCCESS"
    assert time.monotonic() - began < 5


class _FailingTeardownRuntime(SubprocessRuntime):
    """Fault injection: the tree really exits, then aclose() reports a teardown failure."""

    async def spawn(self, spec: SpawnSpec) -> ManagedProcess:
        process = await super().spawn(spec)
        real_aclose = process.aclose

        async def failing_aclose() -> None:
            await real_aclose()
            raise TeardownError("injected")

        process.aclose = failing_aclose  # type: ignore[method-assign]
        return process


async def test_startup_failure_rolls_back(tmp_path: Path, make_request: Any) -> None:
    with pytest.raises(ProductFailure) as caught:
        await _provider(tmp_path, "die-at-start").start(make_request("task", tmp_path))
    assert str(caught.value) == (
        "subagent-claude-code: Product subagent failure (product: Claude Code; "
        "stage: query-start; category: process-exit; exit code: 3)"
    )


async def test_startup_and_rollback_failure_raise_an_exception_group(
    tmp_path: Path, make_request: Any
) -> None:
    env = {"STANDIN_SCENARIO": "die-at-start", "STANDIN_LOG": str(tmp_path / "log.jsonl")}
    runtime = _FailingTeardownRuntime()
    provider = provider_with_program(
        ClaudeCodeProviderConfig(env=env), [sys.executable, str(SCRIPT)], runtime=runtime
    )
    with pytest.raises(ExceptionGroup) as caught:
        await provider.start(make_request("task", tmp_path))
    start_line = (
        "subagent-claude-code: Product subagent failure (product: Claude Code; "
        "stage: query-start; category: process-exit; exit code: 3)"
    )
    teardown_line = (
        "subagent-claude-code: Product subagent failure (product: Claude Code; "
        "stage: teardown; category: unknown)"
    )
    assert caught.value.message == f"{start_line}; {teardown_line}"
    assert [str(e) for e in caught.value.exceptions] == [start_line, teardown_line]
    assert runtime.live == ()
