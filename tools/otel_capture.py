"""The tests' OpenTelemetry SDK setup: what a host would configure, captured for assertions.

dsh configures no SDK; a test plays the host. The API's global providers can be set once per
process, so every test of a session shares one ``Capture``: an in-memory span exporter, an
in-memory metric reader, and a slot for extra span processors (an OTLP exporter) that a test
adds and removes. Spans are recorded only inside ``Capture.recording()``: outside it the
tracer is a no-op, so the tests that run later in the same process see no trace context (no
``TRACEPARENT`` in their products' env) and keep no spans. ``export_spans_to_dir`` is a Ray
worker setup step: it writes each span a worker ends as a JSON line under
``$DSH_TEST_SPAN_DIR``.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = [
    "SPAN_DIR_ENV",
    "Capture",
    "OtlpReceiver",
    "ReceivedSpan",
    "capture",
    "export_spans_to_dir",
    "read_span_dir",
]

SPAN_DIR_ENV = "DSH_TEST_SPAN_DIR"


@dataclass
class _Extra(SpanProcessor):
    """Forwards to the processors a test added; removable, unlike the SDK's own list."""

    processors: list[SpanProcessor] = field(default_factory=list)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        for processor in list(self.processors):
            processor.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        for processor in list(self.processors):
            processor.on_end(span)

    def shutdown(self) -> None:
        for processor in list(self.processors):
            processor.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return all(p.force_flush(timeout_millis) for p in list(self.processors))


class _SwitchedTracer(trace.Tracer):
    """The SDK's tracer while its switch is on, the API's no-op tracer otherwise."""

    def __init__(self, switch: _Switch, real: trace.Tracer) -> None:
        self._switch, self._real = switch, real

    def _now(self) -> trace.Tracer:
        return self._real if self._switch.on else trace.NoOpTracer()

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self._now().start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self._now().start_as_current_span(*args, **kwargs)


class _Switch(trace.TracerProvider):
    def __init__(self, real: TracerProvider) -> None:
        self.real, self.on = real, False

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _SwitchedTracer(self, self.real.get_tracer(*args, **kwargs))


@dataclass
class Capture:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    extra: _Extra
    switch: _Switch

    @contextmanager
    def recording(self) -> Iterator[InMemorySpanExporter]:
        """Record spans in the block (cleared at its start and end); yields the exporter."""
        self.spans.clear()
        self.switch.on = True
        try:
            yield self.spans
        finally:
            self.switch.on = False
            self.spans.clear()

    @contextmanager
    def processor(self, processor: SpanProcessor) -> Iterator[SpanProcessor]:
        """Add ``processor`` for the block; it is flushed and shut down at the end."""
        self.extra.processors.append(processor)
        try:
            yield processor
        finally:
            self.extra.processors.remove(processor)
            processor.force_flush()
            processor.shutdown()

    def metric_points(self, name: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        if data is None:  # nothing recorded yet
            return []
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]


_LOCK = threading.Lock()
_CAPTURES: list[Capture] = []


def capture() -> Capture:
    """The process's capture, set up as the global providers on first use."""
    with _LOCK:
        if _CAPTURES:
            return _CAPTURES[0]
        provider = TracerProvider()
        made = Capture(InMemorySpanExporter(), InMemoryMetricReader(), _Extra(), _Switch(provider))
        provider.add_span_processor(SimpleSpanProcessor(made.spans))
        provider.add_span_processor(made.extra)
        trace.set_tracer_provider(made.switch)
        metrics.set_meter_provider(MeterProvider(metric_readers=[made.metrics]))
        if trace.get_tracer_provider() is not made.switch:
            raise RuntimeError("something else set the global tracer provider first")
        _CAPTURES.append(made)
        return made


class _JsonLines(SpanProcessor):
    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()

    def on_end(self, span: ReadableSpan) -> None:
        context, parent = span.context, span.parent
        record = {
            "name": span.name,
            "trace_id": format(context.trace_id, "032x") if context else None,
            "span_id": format(context.span_id, "016x") if context else None,
            "parent_span_id": format(parent.span_id, "016x") if parent else None,
            "attributes": {k: _plain(v) for k, v in (span.attributes or {}).items()},
        }
        with self._lock, self._path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def export_spans_to_dir() -> None:
    """Ray worker setup: write this process's ended spans to ``$DSH_TEST_SPAN_DIR/<pid>.jsonl``."""
    directory = os.environ.get(SPAN_DIR_ENV)
    if not directory or not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return  # not asked for, or this worker process has its provider already
    provider = TracerProvider()
    provider.add_span_processor(_JsonLines(Path(directory) / f"{os.getpid()}.jsonl"))
    trace.set_tracer_provider(provider)


def read_span_dir(directory: Path) -> list[dict[str, Any]]:
    """Every span record the workers wrote under ``directory``."""
    records = []
    for path in sorted(directory.glob("*.jsonl")):
        records += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return records


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span: its name, ids as hex (``parent_id`` empty for a root) and attributes."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]


class OtlpReceiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1: ``endpoint`` takes ``POST /v1/traces``.

    ``spans`` are the received spans (protobuf bodies). Use as a context manager; it stops its
    server on exit.
    """

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        self.spans: list[ReceivedSpan] = []
        self.paths: list[str] = []
        received, paths = self.spans, self.paths

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                paths.append(self.path)
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            received.append(
                                ReceivedSpan(
                                    span.name,
                                    span.trace_id.hex(),
                                    span.span_id.hex(),
                                    span.parent_span_id.hex(),
                                    {a.key: _any_value(a.value) for a in span.attributes},
                                )
                            )
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1/traces"

    def named(self, name: str) -> list[ReceivedSpan]:
        return [span for span in self.spans if span.name == name]

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _any_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_any_value(item) for item in value.array_value.values]
    return getattr(value, kind) if kind else None
