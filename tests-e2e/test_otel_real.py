"""OpenTelemetry with the real products: spans carry the loopback servers' counts and no secret.

The test plays the host: ``tools/otel_capture.py`` sets up the SDK (in-memory exporter and
reader) that a host would configure. The loopback model servers report chosen token counts and,
for the failure, an error body holding a canary; the prompt and the provider's env hold canaries
too. None of them may appear in any attribute, event or status of any span.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from otel_capture import OtlpReceiver, capture

from dsh.subagent_claude_code.testing import SAMPLE_USAGE as CLAUDE_USAGE
from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_codex.testing import (
    SAMPLE_USAGE,
    FakeResponsesServer,
    HttpStatus,
    Stall,
)
from dsh.tool_subagent import Caller, Harness

pytestmark = pytest.mark.real_product

PROMPT_CANARY = "otel-prompt-canary-8e2"
BODY_CANARY = "otel-body-canary-41c"
ENV_CANARY = "otel-env-canary-77d"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with capture().recording() as exporter:
        yield exporter


def harness(loopback: Any) -> Harness:
    secret_env = {"DSH_TEST_SECRET": ENV_CANARY}
    return Harness.from_profile(
        loopback.profile(
            {"dispose_grace_ms": 1000},
            codex={"env": loopback.codex_env | secret_env},
            claude={"env": loopback.claude_env | secret_env},
        )
    )


def by_name(exporter: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in exporter.get_finished_spans():
        found.setdefault(span.name, []).append(span)
    return found


def assert_no_canary(exporter: InMemorySpanExporter) -> None:
    for span in exporter.get_finished_spans():
        recorded = repr(dict(span.attributes or {})) + repr(span.status.description)
        recorded += "".join(f"{e.name}{dict(e.attributes or {})!r}" for e in span.events)
        for canary in (PROMPT_CANARY, BODY_CANARY, ENV_CANARY, str(Path.home())):
            assert canary not in recorded, (span.name, recorded)


def ours(exporter: InMemorySpanExporter, tool: str) -> ReadableSpan:
    (span,) = by_name(exporter)[f"invoke_agent {tool}"]
    return span


def children(exporter: InMemorySpanExporter, parent: ReadableSpan) -> list[str]:
    assert parent.context is not None
    return sorted(
        span.name
        for span in exporter.get_finished_spans()
        if span.parent is not None and span.parent.span_id == parent.context.span_id
    )


@pytest.mark.timeout(180)
async def test_both_products_foreground_and_a_failure(
    loopback: Any, spans: InMemorySpanExporter
) -> None:
    caller = Caller(session_id="otel", cwd=str(loopback.root))
    codex, claude = loopback.codex, loopback.claude
    codex.usage = dict(SAMPLE_USAGE)
    claude.usage = dict(CLAUDE_USAGE)
    codex.queue_text("codex answer")
    claude.queue_text("claude answer")
    async with harness(loopback) as built:
        for tool in ("subagent_codex", "subagent_claude_code"):
            result = await built.tool(tool).call(
                {"description": "otel", "prompt": f"count {PROMPT_CANARY}"}, caller
            )
            assert result.is_error is False, result.text
        codex_span = ours(spans, "subagent_codex")
        claude_span = ours(spans, "subagent_claude_code")
        # The counts are the servers' (Codex: the Responses usage; Claude Code: model_usage).
        codex_attributes = dict(codex_span.attributes or {})
        assert {k: codex_attributes[k] for k in sorted(codex_attributes) if "usage" in k} == {
            "dsh.usage.context_window": 258400,
            "dsh.usage.model_requests": 1,
            "dsh.usage.reasoning_output_tokens": 7,
            "dsh.usage.total_tokens": 1030,
            "gen_ai.usage.cache_read.input_tokens": 200,
            "gen_ai.usage.input_tokens": 1000,
            "gen_ai.usage.output_tokens": 30,
        }
        assert codex_attributes["gen_ai.provider.name"] == "openai"
        claude_attributes = dict(claude_span.attributes or {})
        assert claude_attributes["gen_ai.usage.input_tokens"] == 11
        assert claude_attributes["gen_ai.usage.output_tokens"] == 7
        assert claude_attributes["gen_ai.usage.cache_read.input_tokens"] == 13
        assert isinstance(claude_attributes["dsh.usage.cost_usd"], float)
        assert claude_attributes["dsh.usage.cost_usd"] > 0
        assert claude_attributes["gen_ai.provider.name"] == "anthropic"
        for span in (codex_span, claude_span):
            assert span.attributes["dsh.outcome"] == "completed"  # type: ignore[index]
            assert children(spans, span) == ["dsh.start", "dsh.teardown", "dsh.turn"]
        turns = by_name(spans)["dsh.turn"]
        assert all([e.name for e in turn.events] == ["dsh.first_activity"] for turn in turns)

        # A model-side failure: the span names the category, never the body.
        spans.clear()
        codex.queue(HttpStatus(500, {"error": {"message": BODY_CANARY}}))
        failed = await built.tool("subagent_codex").call(
            {"description": "otel", "prompt": f"fail {PROMPT_CANARY}"}, caller
        )
        assert failed.is_error is True
        failed_span = ours(spans, "subagent_codex")
        failed_attributes = dict(failed_span.attributes or {})
        assert failed_attributes["dsh.outcome"] == "error"
        category = failed_attributes["error.type"]
        assert f"category: {category}" in failed.text  # the same fact the model got
        assert failed_span.status.status_code is StatusCode.ERROR
    assert_no_canary(spans)


@pytest.mark.timeout(180)
async def test_a_background_job_continues_the_hosts_trace(
    loopback: Any, spans: InMemorySpanExporter
) -> None:
    caller = Caller(session_id="otel-bg", cwd=str(loopback.root))
    loopback.claude.queue_text("background answer")
    async with harness(loopback) as built:
        with trace.get_tracer("host").start_as_current_span("host turn") as host:
            started = await built.tool("subagent_claude_code").call(
                {"description": "bg", "prompt": PROMPT_CANARY, "run_in_background": True},
                caller,
            )
        assert started.value is not None
        snapshot = await built.jobs.wait(started.value["job_id"], 120, caller)
        assert snapshot.status_line == "[status: completed]"
    span = ours(spans, "subagent_claude_code")
    assert span.context is not None
    assert span.parent is not None
    assert span.parent.span_id == host.get_span_context().span_id
    assert span.context.trace_id == host.get_span_context().trace_id
    assert [(e.name, dict(e.attributes or {})) for e in span.events] == [
        ("dsh.job.running", {"dsh.job.id": snapshot.id}),
        ("dsh.job.settled", {"dsh.job.status": "completed"}),
    ]
    assert_no_canary(spans)


@pytest.mark.timeout(180)
async def test_spans_export_over_otlp_http_to_a_loopback_collector(loopback: Any) -> None:
    caller = Caller(session_id="otel-otlp", cwd=str(loopback.root))
    with OtlpReceiver() as receiver:
        exporter = OTLPSpanExporter(endpoint=receiver.endpoint, timeout=10)
        with capture().recording(), capture().processor(BatchSpanProcessor(exporter)):
            codex = loopback.codex
            codex.usage = dict(SAMPLE_USAGE)
            codex.queue_text("exported")
            async with harness(loopback) as built:
                result = await built.tool("subagent_codex").call(
                    {"description": "otlp", "prompt": PROMPT_CANARY}, caller
                )
                assert result.text == "exported"
        # Leaving the block flushed the batch processor: the collector has the spans.
        names = sorted(span.name for span in receiver.spans)
        assert receiver.paths
        assert set(receiver.paths) == {"/v1/traces"}
    assert names == ["dsh.start", "dsh.teardown", "dsh.turn", "invoke_agent subagent_codex"]
    (root,) = [s.attributes for s in receiver.spans if s.name.startswith("invoke_agent")]
    assert root["gen_ai.usage.input_tokens"] == 1000
    assert root["gen_ai.operation.name"] == "invoke_agent"
    assert len({span.trace_id for span in receiver.spans}) == 1
    assert all(PROMPT_CANARY not in repr(span.attributes) for span in receiver.spans)


def _codex_tool_output(server: FakeResponsesServer) -> str:
    (result,) = [
        item
        for item in server.requests[1].body["input"]
        if item.get("type") == "function_call_output"
    ]
    return str(result["output"])


def _claude_tool_output(server: FakeMessagesServer) -> str:
    [result] = [
        block
        for block in (server.requests[1].body or {})["messages"][-1]["content"]
        if block.get("type") == "tool_result"
    ]
    content = result["content"]
    if isinstance(content, list):
        content = "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return str(content)


@pytest.mark.timeout(180)
async def test_the_products_tools_see_the_start_spans_trace_context(
    loopback: Any, spans: InMemorySpanExporter
) -> None:
    """TRACEPARENT reaches each product's process and, through it, a tool command it runs."""
    caller = Caller(session_id="otel-env", cwd=str(loopback.root))
    command = "printenv TRACEPARENT || echo none"
    codex, claude = loopback.codex, loopback.claude
    codex.queue_tool_call("exec_command", {"cmd": command, "login": False})
    codex.queue_text("codex done")
    claude.queue_tool_call("Bash", {"command": command, "description": "print it"})
    claude.queue_text("claude done")
    built = Harness.from_profile(loopback.profile({}, **loopback.unattended()))
    async with built:
        for tool in ("subagent_codex", "subagent_claude_code"):
            result = await built.tool(tool).call(
                {"description": "env", "prompt": "print the trace context"}, caller
            )
            assert result.is_error is False, result.text
    seen = {"codex": _codex_tool_output(codex), "claude": _claude_tool_output(claude)}
    starts = {span.parent.span_id: span for span in by_name(spans)["dsh.start"] if span.parent}
    for product, tool in (("codex", "subagent_codex"), ("claude", "subagent_claude_code")):
        root = ours(spans, tool)
        assert root.context is not None
        start = starts[root.context.span_id]
        assert start.context is not None
        ids = f"00-{start.context.trace_id:032x}-{start.context.span_id:016x}-"
        # Codex wraps a command's output in a header; the value is its own line. The SDK's
        # span has the flags 03; the products get the sampled bit only (Codex rejects 03).
        assert start.context.trace_flags == 0x03
        (value,) = [line for line in seen[product].splitlines() if line.startswith("00-")]
        assert value == ids + "01", (product, seen[product])


@pytest.mark.timeout(180)
async def test_a_cancelled_real_run_ends_its_span_after_the_tree_is_gone(
    loopback: Any, spans: InMemorySpanExporter
) -> None:
    caller = Caller(session_id="otel-cancel", cwd=str(loopback.root))
    codex = loopback.codex
    codex.queue(Stall(seconds=60))
    async with harness(loopback) as built:
        call = asyncio.create_task(
            built.tool("subagent_codex").call(
                {"description": "cancel", "prompt": PROMPT_CANARY}, caller
            )
        )
        for _ in range(600):  # until the model request is in flight (60 s at most)
            if codex.requests:
                break
            await asyncio.sleep(0.1)
        assert codex.requests, "the run never reached the model"
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        codex.release_stalls()
    span = ours(spans, "subagent_codex")
    attributes = dict(span.attributes or {})
    assert (attributes["dsh.outcome"], attributes["error.type"]) == ("cancelled", "cancelled")
    assert span.status.status_code is StatusCode.UNSET
    (teardown,) = by_name(spans)["dsh.teardown"]
    assert dict(teardown.attributes or {}) == {"dsh.tree_exit.proven": True}
    assert span.end_time is not None
    assert teardown.end_time is not None
    assert teardown.end_time <= span.end_time
    assert_no_canary(spans)
