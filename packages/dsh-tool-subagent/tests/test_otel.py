"""OpenTelemetry: the span tree and metrics of delegations, through an SDK this module sets up.

The SDK's in-memory exporter and reader (``tools/otel_capture.py``) stand in for the host's
configuration (dsh configures none itself). A canary in the prompt, the failure body and the
environment must show in no attribute or event. The real products are exercised in
tests-e2e/test_otel_real.py.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from otel_capture import capture

from dsh.jobs import JobRegistry, JobStatus
from dsh.subagent import SubagentService, UsageFacts
from dsh.subagent.kit import FailureFacts
from dsh.subagent.testing import FakeProvider
from dsh.subprocess.testing import run_to_exit
from dsh.tool_subagent import Caller, SubagentTool, SubagentToolConfig

CANARY = "otel-canary-5d1f"
CALLER = Caller(session_id="s1", cwd="/tmp")
USAGE = UsageFacts(input_tokens=11, output_tokens=7, cached_input_tokens=3, cost_usd=0.25)
FACTS = FailureFacts(
    product="Codex", stage="turn", category="httpConnectionFailed", http_status=503
)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    # The SDK a host would configure (tools/otel_capture.py), recording for this test only.
    with capture().recording() as exporter:
        yield exporter


def mount(provider: FakeProvider) -> tuple[SubagentTool, JobRegistry]:
    service = SubagentService()
    service.register(provider)
    jobs = JobRegistry()
    config = SubagentToolConfig(
        provider=provider.name, tool_name="subagent_fake", max_depth="provider-managed"
    )
    return SubagentTool(config, service, jobs, portable_provider=("codex", {})), jobs


async def published(provider: FakeProvider) -> None:
    """Wait (up to 5 s) until the provider has published a run."""
    for _ in range(1000):
        if provider.runs:
            return
        await asyncio.sleep(0.005)
    pytest.fail("the run was never published")


def tree(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    """The finished spans by name (each name once in these tests)."""
    finished = exporter.get_finished_spans()
    by_name = {span.name: span for span in finished}
    assert len(by_name) == len(finished), [span.name for span in finished]
    return by_name


def everything_recorded(spans: dict[str, ReadableSpan]) -> str:
    """Every attribute and event of every span, as one text to search for leaks."""
    parts: list[str] = []
    for span in spans.values():
        parts.append(repr(dict(span.attributes or {})))
        parts.extend(f"{e.name} {dict(e.attributes or {})!r}" for e in span.events)
        parts.append(repr(span.status.description))
    return "\n".join(parts)


def assert_nothing_leaks(spans: dict[str, ReadableSpan]) -> None:
    recorded = everything_recorded(spans)
    for secret in (CANARY, "Product subagent failure", "/tmp", os.environ.get("HOME", "~~")):
        assert secret not in recorded


def metric_points(name: str) -> list[Any]:
    return capture().metric_points(name)


def delegations_counted(outcome: str) -> int:
    return sum(
        int(point.value)
        for point in metric_points("dsh.delegations")
        if point.attributes.get("dsh.outcome") == outcome
    )


async def test_a_foreground_run_is_one_invoke_agent_span_with_three_phases(
    spans: InMemorySpanExporter,
) -> None:
    tool, _ = mount(FakeProvider(usage=USAGE, start_delay=0.02, delay=0.05))
    before = delegations_counted("completed")
    result = await tool.call({"description": "d", "prompt": f"answer {CANARY}"}, CALLER)
    assert result.is_error is False
    by_name = tree(spans)
    assert sorted(by_name) == [
        "dsh.start",
        "dsh.teardown",
        "dsh.turn",
        "invoke_agent subagent_fake",
    ]
    root = by_name["invoke_agent subagent_fake"]
    assert root.parent is None
    assert root.context is not None
    for phase in ("dsh.start", "dsh.turn", "dsh.teardown"):
        parent = by_name[phase].parent
        assert parent is not None
        assert parent.span_id == root.context.span_id
    attributes = dict(root.attributes or {})
    assert attributes == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "subagent_fake",
        "gen_ai.provider.name": "openai",
        "dsh.provider": "fake",
        "dsh.provider.kind": "codex",
        "dsh.mode": "foreground",
        "dsh.outcome": "completed",
        "gen_ai.response.finish_reasons": ("completed",),
        "gen_ai.usage.input_tokens": 11,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.usage.cache_read.input_tokens": 3,
        "dsh.usage.cost_usd": 0.25,
    }
    assert root.status.status_code is StatusCode.UNSET
    # The phases follow each other; the first model output is an event of the turn.
    start, turn, teardown = (by_name[p] for p in ("dsh.start", "dsh.turn", "dsh.teardown"))
    assert start.end_time <= turn.start_time <= turn.end_time <= teardown.start_time  # type: ignore[operator]
    assert start.end_time - start.start_time >= 20_000_000  # type: ignore[operator]
    (event,) = turn.events
    assert event.name == "dsh.first_activity"
    assert turn.start_time <= event.timestamp <= turn.end_time  # type: ignore[operator]
    assert dict(teardown.attributes or {}) == {"dsh.tree_exit.proven": True}
    assert_nothing_leaks(by_name)
    assert delegations_counted("completed") == before + 1
    assert metric_points("dsh.tree_exit.duration")
    assert metric_points("dsh.delegation.duration")


async def test_a_failed_run_names_its_category_and_nothing_of_its_text(
    spans: InMemorySpanExporter,
) -> None:
    tool, _ = mount(FakeProvider(failure=FACTS))
    before = delegations_counted("error")
    result = await tool.call({"description": "d", "prompt": CANARY}, CALLER)
    assert result.is_error is True
    assert "httpConnectionFailed" in result.text  # the model's text has the safe line
    root = tree(spans)["invoke_agent subagent_fake"]
    attributes = dict(root.attributes or {})
    assert attributes["dsh.outcome"] == "error"
    assert attributes["error.type"] == "httpConnectionFailed"
    assert root.status.status_code is StatusCode.ERROR
    assert root.status.description == "httpConnectionFailed"
    assert_nothing_leaks(tree(spans))
    assert delegations_counted("error") == before + 1


async def test_a_failed_start_is_a_span_without_phases_after_it(
    spans: InMemorySpanExporter,
) -> None:
    tool, _ = mount(FakeProvider(start_error=RuntimeError(f"raw {CANARY}")))
    result = await tool.call({"description": "d", "prompt": "p"}, CALLER)
    assert result.is_error is True
    by_name = tree(spans)
    assert sorted(by_name) == ["dsh.start", "invoke_agent subagent_fake"]
    assert by_name["invoke_agent subagent_fake"].attributes["dsh.outcome"] == "start_failed"  # type: ignore[index]
    assert not by_name["dsh.start"].events  # no exception (and its text) recorded
    assert_nothing_leaks(by_name)


async def test_a_cancelled_run_ends_its_span_as_cancelled(spans: InMemorySpanExporter) -> None:
    provider = FakeProvider(delay=None)
    tool, _ = mount(provider)
    before = delegations_counted("cancelled")
    call = asyncio.create_task(tool.call({"description": "d", "prompt": CANARY}, CALLER))
    await published(provider)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    by_name = tree(spans)
    root = by_name["invoke_agent subagent_fake"]
    assert root.attributes["dsh.outcome"] == "cancelled"  # type: ignore[index]
    assert root.attributes["error.type"] == "cancelled"  # type: ignore[index]
    assert root.status.status_code is StatusCode.UNSET  # a cancellation is not a failure
    assert by_name["dsh.teardown"].attributes == {"dsh.tree_exit.proven": True}
    assert not by_name["dsh.turn"].events  # no exception event, no first activity
    assert_nothing_leaks(by_name)
    assert delegations_counted("cancelled") == before + 1
    in_flight = metric_points("dsh.delegations.in_flight")
    assert sum(point.value for point in in_flight) == 0  # every run that began has ended


async def test_a_background_job_continues_the_callers_trace_with_lifecycle_events(
    spans: InMemorySpanExporter,
) -> None:
    tool, jobs = mount(FakeProvider(usage=USAGE, delay=0.02))
    async with jobs:
        with trace.get_tracer("host").start_as_current_span("host turn") as host:
            started = await tool.call(
                {"description": "bg", "prompt": CANARY, "run_in_background": True}, CALLER
            )
        assert started.value is not None
        snapshot = await jobs.wait(started.value["job_id"], 5, CALLER)
        assert snapshot.status is JobStatus.COMPLETED
    by_name = tree(spans)
    root = by_name["invoke_agent subagent_fake"]
    assert root.parent is not None
    assert root.parent.span_id == host.get_span_context().span_id
    assert root.context.trace_id == host.get_span_context().trace_id
    assert root.attributes["dsh.mode"] == "background"  # type: ignore[index]
    events = [(e.name, dict(e.attributes or {})) for e in root.events]
    assert events == [
        ("dsh.job.running", {"dsh.job.id": snapshot.id}),
        ("dsh.job.settled", {"dsh.job.status": "completed"}),
    ]
    assert_nothing_leaks(by_name)


async def test_a_killed_job_settles_its_span(spans: InMemorySpanExporter) -> None:
    provider = FakeProvider(delay=None)
    tool, jobs = mount(provider)
    async with jobs:
        started = await tool.call(
            {"description": "bg", "prompt": "p", "run_in_background": True}, CALLER
        )
        assert started.value is not None
        await published(provider)
        jobs.kill(started.value["job_id"], CALLER, "stop")
        snapshot = await jobs.wait(started.value["job_id"], 5, CALLER)
        assert snapshot.status is JobStatus.KILLED
    root = tree(spans)["invoke_agent subagent_fake"]
    assert root.attributes["dsh.outcome"] == "cancelled"  # type: ignore[index]
    assert [e.name for e in root.events] == ["dsh.job.running", "dsh.job.settled"]
    assert dict(root.events[1].attributes or {}) == {"dsh.job.status": "killed"}


_WITHOUT_OTEL = """
import asyncio, sys

class NoOpenTelemetry:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError("blocked: the [otel] extra is not installed")
        return None

sys.meta_path.insert(0, NoOpenTelemetry())

from dsh.jobs import JobRegistry
from dsh.subagent import SubagentService
from dsh.subagent.testing import FakeProvider
from dsh.tool_subagent import Caller, SubagentTool, SubagentToolConfig
from dsh.tool_subagent import _otel

async def main():
    service = SubagentService()
    service.register(FakeProvider())
    config = SubagentToolConfig(provider="fake", max_depth="provider-managed")
    tool = SubagentTool(config, service, JobRegistry())
    result = await tool.call({"description": "d", "prompt": "works"}, Caller("s", None))
    loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
    print(result.text, _otel.enabled(), loaded)

asyncio.run(main())
"""


async def test_without_the_extra_nothing_imports_opentelemetry_and_runs_still_work(
    tmp_path: Path,
) -> None:
    script = tmp_path / "without_otel.py"
    script.write_text(_WITHOUT_OTEL, encoding="utf-8")
    env = {"PATH": os.environ.get("PATH", "")}
    done = await run_to_exit([sys.executable, str(script)], env=env, timeout_s=60)
    assert (done.exit_code, done.stdout) == (0, "works False []\n"), done.stderr
