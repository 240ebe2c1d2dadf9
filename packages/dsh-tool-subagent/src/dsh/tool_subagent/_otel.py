"""OpenTelemetry spans and metrics of delegations, through the host's own SDK (``[otel]``).

dsh never configures a tracer provider, a meter provider or an exporter: it asks the
OpenTelemetry API for a tracer and a meter, which record nothing until the host installs an SDK.
Without ``opentelemetry-api`` (the ``[otel]`` extra) this module imports none of it, and every
call here does nothing. With it, the API is imported only once a host can have configured it:
the host has imported the API itself (a provider is set through it) or names a provider in
the environment (``OTEL_PYTHON_TRACER_PROVIDER``, ``OTEL_PYTHON_METER_PROVIDER``), or a
delegation arrives with a trace context to continue; so a plain ``dsh run`` never pays for the
import (docs/performance.md, "Start-up"). It is the only dsh module that imports OpenTelemetry
(an import contract in pyproject.toml says so).

A span or a metric holds names, counts, timings, the stop reason and the safe failure category.
Never a prompt, an answer, a diagnostic text, a path or an environment value.

Spans (GenAI semantic conventions where they fit): ``invoke_agent <tool>`` per delegation, with
children ``dsh.start`` (spawn to publication), ``dsh.turn`` (publication to the result; event
``dsh.first_activity``) and ``dsh.teardown`` (the whole-tree close); a background delegation's
span also has the events ``dsh.job.running`` and ``dsh.job.settled``. Metrics: ``dsh.delegations``
(by outcome), ``dsh.delegation.duration``, ``dsh.delegations.in_flight`` and
``dsh.tree_exit.duration``.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from dsh.subagent import UsageFacts
from dsh.subagent.kit import RunTimings
from dsh.tool_subagent._known_providers import KNOWN_PROVIDERS
from dsh.tool_subagent._version import __version__

__all__ = [
    "DelegationLabels",
    "DelegationSpan",
    "delegation_span",
    "enabled",
    "failure_category",
    "remote_parent",
    "trace_carrier",
]

_SCOPE = "dsh.tool_subagent"
_CATEGORY = re.compile(r"category: ([A-Za-z0-9_.-]{1,64})[;)]")

#: A product kind's ``gen_ai.provider.name`` (the model vendor behind it), from the one table.
_GENAI_PROVIDERS = {known.kind: known.vendor for known in KNOWN_PROVIDERS}

#: ``UsageFacts`` field -> span attribute.
_USAGE_ATTRIBUTES = {
    "input_tokens": "gen_ai.usage.input_tokens",
    "output_tokens": "gen_ai.usage.output_tokens",
    "cached_input_tokens": "gen_ai.usage.cache_read.input_tokens",
    "cache_creation_input_tokens": "gen_ai.usage.cache_creation.input_tokens",
    "reasoning_output_tokens": "dsh.usage.reasoning_output_tokens",
    "total_tokens": "dsh.usage.total_tokens",
    "context_window": "dsh.usage.context_window",
    "cost_usd": "dsh.usage.cost_usd",
    "model_requests": "dsh.usage.model_requests",
    "rate_limit_used_percent": "dsh.rate_limit.used_percent",
    "rate_limit_window_minutes": "dsh.rate_limit.window_minutes",
    "rate_limit_resets_at": "dsh.rate_limit.resets_at",
    "rate_limit_reached": "dsh.rate_limit.reached",
}


def enabled() -> bool:
    """Whether the OpenTelemetry API is installed (a host SDK may or may not be configured)."""
    return _api() is not None


_API: list[Any] = []
#: Environment variables that name a provider the API loads at its first use.
_PROVIDER_VARIABLES = ("OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER")


def _api() -> Any:
    """The OpenTelemetry API modules this module uses, imported at the first call; ``None``
    when the ``[otel]`` extra is not installed (then nothing here records)."""
    if not _API:
        try:
            from opentelemetry import context, metrics, propagate, trace
            from opentelemetry.trace import SpanKind, Status, StatusCode
        except ImportError:
            _API.append(None)
        else:
            _API.append(
                SimpleNamespace(
                    context=context,
                    metrics=metrics,
                    propagate=propagate,
                    trace=trace,
                    SpanKind=SpanKind,
                    Status=Status,
                    StatusCode=StatusCode,
                )
            )
    return _API[0]


@dataclass(frozen=True, slots=True)
class DelegationLabels:
    """What names a delegation in telemetry: the tool, the provider instance and its kind."""

    tool: str
    provider: str
    kind: str | None = None
    model: str | None = None


def trace_carrier() -> dict[str, str]:
    """The current span's W3C trace context (``traceparent``, ``tracestate``), or ``{}``."""
    if not _host_configured():
        return {}
    carrier: dict[str, str] = {}
    _api().propagate.inject(carrier)
    return carrier


def failure_category(text: str | None) -> str | None:
    """The ``category`` of a safe failure line (``... category: C; ...``), or ``None``."""
    if not text:
        return None
    match = _CATEGORY.search(text)
    return match.group(1) if match else None


class DelegationSpan:
    """One delegation's span and metrics; every method is a no-op without OpenTelemetry."""

    def __init__(self, span: Any, labels: DelegationLabels, mode: str) -> None:
        self._span = span
        self._attributes = {"dsh.provider": labels.provider, "dsh.mode": mode}
        self._began = time.monotonic()
        self._ended = False

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[Any]:
        """A child span named ``name``, current while the block runs."""
        if self._span is None:
            yield None
            return
        with _tracer().start_as_current_span(
            name, record_exception=False, set_status_on_exception=False
        ) as child:
            yield child

    def first_activity(self, turn: Any, stamp: float | None) -> None:
        """Add the ``dsh.first_activity`` event (a ``time.monotonic()`` stamp) to ``turn``."""
        if turn is None or stamp is None:
            return
        turn.add_event("dsh.first_activity", timestamp=_epoch_ns(stamp))

    def event(self, name: str, attributes: Mapping[str, str]) -> None:
        """Add the event ``name`` to the delegation's span (a Job's lifecycle)."""
        if self._span is not None:
            self._span.add_event(name, attributes=dict(attributes))

    def finish(
        self,
        outcome: str,
        *,
        stop_reason: str | None = None,
        category: str | None = None,
        usage: UsageFacts | None = None,
        timings: RunTimings | None = None,
    ) -> None:
        """Record how the delegation ended (once): attributes, status, metrics."""
        if self._span is None or self._ended:
            return
        self._ended = True
        span = self._span
        span.set_attribute("dsh.outcome", outcome)
        if stop_reason is not None:
            span.set_attribute("gen_ai.response.finish_reasons", [stop_reason])
        if usage is not None:
            for field, value in usage.as_json().items():
                span.set_attribute(_USAGE_ATTRIBUTES[field], value)
        if outcome != "completed":
            error_type = category or outcome
            span.set_attribute("error.type", error_type)
            if outcome != "cancelled":
                api = _api()
                span.set_status(api.Status(api.StatusCode.ERROR, error_type))
        _record_metrics(self._attributes, outcome, time.monotonic() - self._began, timings)


@contextlib.contextmanager
def delegation_span(labels: DelegationLabels, mode: str) -> Iterator[DelegationSpan]:
    """The ``invoke_agent`` span of one delegation, current while the block runs.

    A block that raises (a cancellation) ends the span as ``cancelled`` unless
    :meth:`DelegationSpan.finish` said otherwise.
    """
    if not _host_configured():
        yield DelegationSpan(None, labels, mode)
        return
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": labels.tool,
        "dsh.provider": labels.provider,
        "dsh.mode": mode,
    }
    vendor = _GENAI_PROVIDERS.get(labels.kind or "")
    if vendor is not None:
        attributes["gen_ai.provider.name"] = vendor
    if labels.kind is not None:
        attributes["dsh.provider.kind"] = labels.kind
    if labels.model is not None:
        attributes["gen_ai.request.model"] = labels.model
    _instruments().in_flight.add(1, {"dsh.provider": labels.provider})
    # The product runs on this machine as dsh's child: an internal span, not a client one.
    span_cm = _tracer().start_as_current_span(
        f"invoke_agent {labels.tool}",
        kind=_api().SpanKind.INTERNAL,
        attributes=attributes,
        record_exception=False,  # an exception's text may carry product output
        set_status_on_exception=False,
    )
    try:
        with span_cm as span:
            recorder = DelegationSpan(span, labels, mode)
            try:
                yield recorder
            except BaseException:
                recorder.finish("cancelled")
                raise
    finally:
        _instruments().in_flight.add(-1, {"dsh.provider": labels.provider})


@contextlib.contextmanager
def remote_parent(carrier: Mapping[str, str] | None) -> Iterator[None]:
    """Make the span of ``carrier`` (another process's ``trace_carrier()``) the current parent."""
    api = _api() if carrier else None
    if api is None or not carrier:
        yield
        return
    token = api.context.attach(api.propagate.extract(dict(carrier)))
    try:
        yield
    finally:
        api.context.detach(token)


# -- helpers -----------------------------------------------------------------------------------


_TRACERS: list[Any] = []


def _host_configured() -> bool:
    """Whether the host set a tracer or a meter provider (else every span and metric is a no-op,
    and skipping them saves their cost: about 50 µs of parent CPU per delegation, measured).

    A provider is set through the API, so a host that has not imported it (and names no provider
    in the environment) has none: the API is not imported to find that out."""
    loaded = "opentelemetry.trace" in sys.modules or "opentelemetry.metrics" in sys.modules
    if not loaded and not any(os.environ.get(name) for name in _PROVIDER_VARIABLES):
        return False
    api = _api()
    if api is None:
        return False
    if not isinstance(api.trace.get_tracer_provider(), api.trace.ProxyTracerProvider):
        return True
    # The API's placeholder meter provider has no public type; its name is stable across 1.x.
    return type(api.metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider"


def _tracer() -> Any:
    """The tracer, made once (the API's proxy forwards to a provider the host sets later)."""
    if not _TRACERS:
        _TRACERS.append(_api().trace.get_tracer(_SCOPE, __version__))
    return _TRACERS[0]


def _epoch_ns(stamp: float) -> int:
    """A ``time.monotonic()`` stamp as the epoch nanoseconds a span event takes."""
    return time.time_ns() - int((time.monotonic() - stamp) * 1e9)


@dataclass(frozen=True, slots=True)
class _Instruments:
    delegations: Any
    duration: Any
    in_flight: Any
    tree_exit: Any


_INSTRUMENTS: list[_Instruments] = []


def _instruments() -> _Instruments:
    """The instruments, made once: before a host sets its meter provider, the API's proxy
    instruments forward to the one it sets later."""
    if not _INSTRUMENTS:
        meter = _api().metrics.get_meter(_SCOPE)
        _INSTRUMENTS.append(
            _Instruments(
                delegations=meter.create_counter(
                    "dsh.delegations", unit="{delegation}", description="Delegations, by outcome."
                ),
                duration=meter.create_histogram(
                    "dsh.delegation.duration", unit="s", description="A delegation, start to close."
                ),
                in_flight=meter.create_up_down_counter(
                    "dsh.delegations.in_flight", unit="{delegation}", description="Runs under way."
                ),
                tree_exit=meter.create_histogram(
                    "dsh.tree_exit.duration",
                    unit="s",
                    description="From the result to the proof that the product's tree is gone.",
                ),
            )
        )
    return _INSTRUMENTS[0]


def _record_metrics(
    attributes: Mapping[str, str], outcome: str, seconds: float, timings: RunTimings | None
) -> None:
    tagged = {**attributes, "dsh.outcome": outcome}
    made = _instruments()
    made.delegations.add(1, tagged)
    made.duration.record(seconds, tagged)
    if timings is not None and timings.tree_exit_s is not None and timings.answer_s is not None:
        made.tree_exit.record(timings.tree_exit_s - timings.answer_s, attributes)
