"""What OpenTelemetry adds to a delegation's parent CPU: not installed, API only, SDK configured.

Each mode runs in a fresh interpreter that performs the same delegations through the delegation
tool with the in-process ``FakeProvider`` (no product process), so the figure is dsh's own
parent-side work per run and nothing else:

- ``absent``: OpenTelemetry cannot be imported (what a host without the ``[otel]`` extra has);
- ``api``: ``opentelemetry-api`` installed, no SDK configured (the API's no-op providers);
- ``sdk``: an SDK tracer and meter provider, spans to an in-memory exporter (a host that
  records everything, before its exporter's own cost).

The modes take turns over several rounds, and each reports the median process CPU per
delegation of its rounds. Run: ``uv run python tests-e2e/benchmarks/otel_cost.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path

from dsh.subprocess import Collect, SpawnSpec, default_runtime

MODES = ("absent", "api", "sdk")

_PROGRAM = """
import asyncio, json, sys, time

MODE, RUNS = sys.argv[1], int(sys.argv[2])
if MODE == "absent":
    class NoOpenTelemetry:
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ImportError("blocked")
            return None
    sys.meta_path.insert(0, NoOpenTelemetry())
elif MODE == "sdk":
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))

from dsh.jobs import JobRegistry
from dsh.subagent import SubagentService
from dsh.subagent.testing import FakeProvider
from dsh.tool_subagent import Caller, SubagentTool, SubagentToolConfig
from dsh.tool_subagent import _otel

async def main():
    service = SubagentService()
    service.register(FakeProvider())
    config = SubagentToolConfig(provider="fake", max_depth="provider-managed")
    tool = SubagentTool(config, service, JobRegistry(), portable_provider=("codex", {}))
    caller = Caller("bench", None)
    arguments = {"description": "d", "prompt": "p"}
    for _ in range(50):  # warm-up: imports, first instruments
        await tool.call(arguments, caller)
    began = time.process_time()
    for _ in range(RUNS):
        await tool.call(arguments, caller)
    spent = time.process_time() - began
    print(json.dumps({"mode": MODE, "otel": _otel.enabled(), "cpu_us": spent / RUNS * 1e6}))

asyncio.run(main())
"""


async def _measure(mode: str, runs: int) -> float:
    spec = SpawnSpec(
        argv=[sys.executable, "-c", _PROGRAM, mode, str(runs)],
        stdout=Collect(1 << 14),
        stderr=Collect(1 << 16),
    )
    async with await default_runtime().spawn(spec) as proc:
        outcome = await proc.wait()
    if outcome.exit_code != 0:
        raise SystemExit(f"{mode} failed:\n{proc.collected('stderr').text[-2000:]}")
    report = json.loads(proc.collected("stdout").text)
    if report["otel"] != (mode != "absent"):
        raise SystemExit(f"{mode}: OpenTelemetry was {'' if report['otel'] else 'not '}importable")
    return float(report["cpu_us"])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=2000, help="delegations per round")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    samples: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode in MODES:
            samples[mode].append(await _measure(mode, args.runs))
    medians = {mode: statistics.median(values) for mode, values in samples.items()}
    base = medians["absent"]
    print(f"parent CPU per delegation (median of {args.rounds} rounds of {args.runs}):")
    for mode in MODES:
        added = medians[mode] - base
        print(f"  {mode:<7} {medians[mode]:8.1f} µs   added vs absent: {added:+7.1f} µs")
    if args.json is not None:
        args.json.write_text(json.dumps({"samples": samples, "medians": medians}, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
