"""A Job on the Ray executor: the worker's span continues the host's trace; the facts come back.

The host plays a deployment with an OpenTelemetry SDK (``tools/otel_capture.py``), and names a
worker setup step (``[jobs] worker_setup``) that gives each Ray worker process an SDK writing its
spans to files the test reads. dsh configures neither.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from otel_capture import SPAN_DIR_ENV, capture, read_span_dir

from dsh.jobs import JobStatus
from dsh.subagent_codex.testing import SAMPLE_USAGE
from dsh.tool_subagent import Harness

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(240)]

WORKER_SETUP = "otel_capture:export_spans_to_dir"


async def test_the_workers_span_is_a_child_of_the_hosts_and_usage_crosses_back(
    setup: Any, ray_kit: Any
) -> None:
    setup.codex.usage = dict(SAMPLE_USAGE)
    harness: Harness = setup.harness(worker_setup=[WORKER_SETUP])
    async with harness:
        # The host's SDK: without one, no span is recording and no context travels.
        with (
            capture().recording(),
            trace.get_tracer("host").start_as_current_span("host turn") as host,
        ):
            result = await harness.tool("subagent_codex").call(
                {"description": "ray otel", "prompt": "otel ray job", "run_in_background": True},
                setup.caller,
            )
        assert result.value is not None, result.text
        snapshot = await harness.jobs.wait(str(result.value["job_id"]), 120, setup.caller)
    assert snapshot.status is JobStatus.COMPLETED, snapshot.detail
    assert snapshot.where in {node.node_id for node in ray_kit.workers}
    # The host-only facts were measured on the worker and came back with the outcome.
    assert snapshot.meta is not None
    assert snapshot.meta["usage"]["input_tokens"] == 1000
    assert list(snapshot.meta["timings"]) == [
        "started_s",
        "first_activity_s",
        "answer_s",
        "tree_exit_s",
    ]
    context = host.get_span_context()
    records = read_span_dir(Path(os.environ[SPAN_DIR_ENV]))
    worker_spans = [r for r in records if r["trace_id"] == f"{context.trace_id:032x}"]
    by_name = {record["name"]: record for record in worker_spans}
    assert sorted(by_name) == [
        "dsh.start",
        "dsh.teardown",
        "dsh.turn",
        "invoke_agent subagent_codex",
    ]
    root = by_name["invoke_agent subagent_codex"]
    assert root["parent_span_id"] == f"{context.span_id:016x}"  # the host's span, across Ray
    assert root["attributes"]["dsh.mode"] == "background"
    assert root["attributes"]["dsh.provider.kind"] == "codex"
    assert root["attributes"]["gen_ai.usage.input_tokens"] == 1000
    assert root["attributes"]["dsh.outcome"] == "completed"
