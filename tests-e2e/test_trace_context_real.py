"""W3C trace context in the real products: their own spans continue dsh's trace.

The test plays the host (``tools/otel_capture.py``'s SDK) and points each product's own
OpenTelemetry trace export at a loopback OTLP/HTTP receiver: Codex through ``[otel]
trace_exporter`` in its ``config.toml``, Claude Code through ``CLAUDE_CODE_ENABLE_TELEMETRY``, the
enhanced-telemetry beta and the ``OTEL_*`` exporter env. Each product's top span must be a child
of dsh's ``dsh.start`` span. The same runs pin what each product's tool commands see of an
``OTEL_EXPORTER_OTLP_HEADERS`` a profile passes in ``env`` and lets through with ``tool_env``
(dsh hides credential-shaped names from tools otherwise): Codex forwards it, Claude Code drops it.
``docs/trace-context-facts.md`` has the measurements behind these facts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_capture import OtlpReceiver, capture

from dsh.subagent_codex.testing import hermetic_env as codex_env
from dsh.subagent_codex.testing import write_codex_home
from dsh.tool_subagent import Caller, Harness

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(120)]

HEADER_CANARY = "trace-header-canary-3f0"
COMMAND = "printenv OTEL_EXPORTER_OTLP_HEADERS || echo no-headers"


@pytest.fixture
def exported() -> Iterator[tuple[InMemorySpanExporter, OtlpReceiver]]:
    """dsh's spans as the host's SDK got them, and the product's as its exporter sent them."""
    with capture().recording() as host, OtlpReceiver() as sink:
        yield host, sink


async def delegate(kind: str, config: dict[str, Any], cwd: Path) -> None:
    """One run of ``kind`` (from a parent at ``cwd``) whose tool commands may see
    ``OTEL_EXPORTER_OTLP_HEADERS``."""
    caller = Caller(session_id=f"trace-{kind}", cwd=str(cwd))
    profile = {"kind": kind, "config": config | {"tool_env": ["OTEL_EXPORTER_OTLP_HEADERS"]}}
    async with Harness.from_profile({"provider": [profile]}) as built:
        (tool,) = built.delegation_tools
        result = await tool.call({"description": "trace", "prompt": "run it"}, caller)
        assert result.is_error is False, result.text


def start_ids(exporter: InMemorySpanExporter) -> tuple[str, str, int]:
    """The trace id and span id (hex) and the trace flags of the one ``dsh.start`` span."""
    starts: list[ReadableSpan] = [
        span for span in exporter.get_finished_spans() if span.name == "dsh.start"
    ]
    (start,) = starts
    assert start.context is not None
    context = start.context
    return f"{context.trace_id:032x}", f"{context.span_id:016x}", int(context.trace_flags)


async def test_codex_spans_continue_the_start_span_and_its_tools_see_passed_headers(
    tmp_path: Path, exported: tuple[InMemorySpanExporter, OtlpReceiver], loopback: Any
) -> None:
    spans, sink = exported
    codex = loopback.codex
    codex.queue_tool_call("exec_command", {"cmd": COMMAND, "login": False})
    codex.queue_text("codex done")
    home = write_codex_home(tmp_path / "codex", codex.base_url, "mock")
    with (home / "config.toml").open("a", encoding="utf-8") as config:
        config.write(
            "\n[otel]\n"
            f'trace_exporter = {{ otlp-http = {{ endpoint = "{sink.endpoint}", '
            'protocol = "binary" } }\n'
        )
    env = codex_env(home) | {"OTEL_EXPORTER_OTLP_HEADERS": f"x-canary={HEADER_CANARY}"}
    mode = "dangerously-bypass-approvals-and-sandbox"
    await delegate("codex", {"permission_mode": mode, "env": env}, tmp_path)
    requests = list(codex.requests)
    trace_id, start_id, flags = start_ids(spans)
    # The SDK gives dsh's root span the flags 03, which Codex 0.163.0 rejects as invalid; dsh
    # hands the products the sampled bit only (01), so Codex continues the trace.
    assert flags == 0x03
    # Codex exports its spans when its process ends, which the run's teardown waited for.
    (turn,) = sink.named("turn/start")
    assert (turn.trace_id, turn.parent_id) == (trace_id, start_id)
    # With its trace export on, Codex sends its own span's context to the model endpoint.
    assert all(r.headers["traceparent"].startswith(f"00-{trace_id}-") for r in requests)
    (output,) = [
        item["output"]
        for item in requests[1].body["input"]
        if item.get("type") == "function_call_output"
    ]
    assert f"x-canary={HEADER_CANARY}" in output


async def test_claude_code_spans_continue_the_start_span_and_its_tools_lose_headers(
    tmp_path: Path, exported: tuple[InMemorySpanExporter, OtlpReceiver], loopback: Any
) -> None:
    spans, sink = exported
    claude = loopback.claude
    claude.queue_tool_call("Bash", {"command": COMMAND, "description": "print it"})
    claude.queue_text("claude done")
    telemetry = {
        "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
        "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA": "1",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": sink.endpoint,
        "OTEL_EXPORTER_OTLP_HEADERS": f"x-canary={HEADER_CANARY}",
    }
    unattended = loopback.unattended()["claude"]
    config = unattended | {"env": unattended["env"] | telemetry}
    await delegate("claude-code", config, tmp_path)
    requests = list(claude.requests)
    trace_id, start_id, flags = start_ids(spans)
    assert flags == 0x03
    (interaction,) = sink.named("claude_code.interaction")  # Claude Code takes 03 and 01
    assert (interaction.trace_id, interaction.parent_id) == (trace_id, start_id)
    assert {span.trace_id for span in sink.spans} == {trace_id}
    outputs = [
        str(block["content"])
        for request in requests
        for message in (request.body or {}).get("messages", [])
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    assert outputs
    assert all("no-headers" in output and HEADER_CANARY not in output for output in outputs)
