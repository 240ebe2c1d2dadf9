"""W3C trace context for spawned processes: ``TRACEPARENT`` and ``TRACESTATE`` in their env.

The caller (dsh's OpenTelemetry layer, which this package does not import) sets the carrier of
its current span with :func:`spawn_trace_context`; every process spawned in that context gets it
in its environment, the convention the OpenTelemetry environment-variable carriers use. Outside
such a context nothing is added. A name the spawn's own ``env`` overlay sets wins. The context
is named "spawn" for what this package does with it; it is the run's trace context.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager

__all__ = [
    "TRACE_CONTEXT_ENV",
    "apply_trace_context",
    "current_trace_context",
    "spawn_trace_context",
]

#: Carrier key -> env name.
TRACE_CONTEXT_ENV = {"traceparent": "TRACEPARENT", "tracestate": "TRACESTATE"}

_CARRIER: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "dsh.subprocess.trace_context", default=None
)


@contextmanager
def spawn_trace_context(carrier: Mapping[str, str]) -> Iterator[None]:
    """Processes spawned in this block get ``carrier`` (a propagator's output) in their env.

    An empty carrier (no span is recording) changes nothing. The products get the W3C level-1
    flags (the sampled bit only): Codex 0.163.0 takes a ``traceparent`` with any other bit set
    (the ``03`` that OpenTelemetry's Python SDK writes for a random trace id) as invalid and
    starts a trace of its own (docs/trace-context-facts.md).
    """
    traceparent = carrier.get("traceparent")
    if not traceparent:
        yield
        return
    token = _CARRIER.set({**carrier, "traceparent": _level_one(traceparent)})
    try:
        yield
    finally:
        _CARRIER.reset(token)


def _level_one(traceparent: str) -> str:
    """``traceparent`` with only the sampled bit of its flags kept (unchanged if malformed)."""
    head, sep, flags = traceparent.rpartition("-")
    try:
        sampled = int(flags, 16) & 0x01
    except ValueError:
        return traceparent
    return f"{head}{sep}{sampled:02x}" if sep and len(flags) == 2 else traceparent


def current_trace_context() -> Mapping[str, str] | None:
    """The carrier :func:`spawn_trace_context` set for this context, or ``None``.

    A provider whose product takes trace context on its protocol too (Codex's JSON-RPC ``trace``
    field) reads it here, so that a warm process spawned before the run gets it as well.
    """
    return _CARRIER.get()


def apply_trace_context(
    env: MutableMapping[str, str], overlay: Mapping[str, str | None] | None
) -> None:
    """Set the current trace context's names in ``env`` (a child's final env), if one is set.

    The ambient ``TRACESTATE`` goes when the carrier has none: it belonged to another parent.
    """
    carrier = _CARRIER.get()
    if carrier is None:
        return
    for key, name in TRACE_CONTEXT_ENV.items():
        if overlay is not None and name in overlay:
            continue
        value = carrier.get(key)
        if value:
            env[name] = value
        else:
            env.pop(name, None)
