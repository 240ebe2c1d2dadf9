"""Safe diagnostics shared by the product providers: failure facts, the failure line, the bound."""

from __future__ import annotations

import signal as _signal
from dataclasses import dataclass

__all__ = [
    "MAX_DIAGNOSTIC_BYTES",
    "RESOURCE_LIMIT_CATEGORY",
    "FailureFacts",
    "bound_diagnostic",
    "failure_line",
    "with_limits_hit",
]

MAX_DIAGNOSTIC_BYTES = 4096
"""The most UTF-8 bytes any diagnostic a provider returns may take."""

RESOURCE_LIMIT_CATEGORY = "resource-limit"
"""The category of a run that dsh ended because its tree ran into a configured limit."""

_TRUNCATION_MARKER = "\n[diagnostic truncated]"
_MARKER_BYTES = len(_TRUNCATION_MARKER.encode("utf-8"))


def _signal_name(value: int) -> str:
    try:
        return _signal.Signals(value).name
    except ValueError:
        return str(value)


@dataclass(frozen=True, slots=True)
class FailureFacts:
    """The safe, structured facts of one product failure.

    ``product`` is the display name (``"Codex"`` or ``"Claude Code"``); ``stage`` and ``category``
    are the provider's fixed vocabulary. ``signal`` may be given as a number and is stored as its
    name (``9`` -> ``"SIGKILL"``). Exit code and signal are independent facts. ``limit`` names
    the configured limit a ``resource-limit`` failure ran into (``memory``, ``tasks``).
    """

    product: str
    stage: str
    category: str
    http_status: int | None = None
    exit_code: int | None = None
    signal: str | int | None = None
    limit: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.signal, int) and not isinstance(self.signal, bool):
            object.__setattr__(self, "signal", _signal_name(self.signal))


def failure_line(facts: FailureFacts) -> str:
    """Render ``facts`` as the one-line safe failure message.

    ``Product subagent failure (product: P; stage: S; category: C; limit: L; HTTP status: n;
    exit code: n; signal: SIG)``, leaving out the optional fields that were not observed.
    """
    parts = [
        f"product: {facts.product}",
        f"stage: {facts.stage}",
        f"category: {facts.category}",
    ]
    if facts.limit is not None:
        parts.append(f"limit: {facts.limit}")
    if facts.http_status is not None:
        parts.append(f"HTTP status: {facts.http_status}")
    if facts.exit_code is not None:
        parts.append(f"exit code: {facts.exit_code}")
    if facts.signal is not None:
        parts.append(f"signal: {facts.signal}")
    return f"Product subagent failure ({'; '.join(parts)})"


def with_limits_hit(facts: FailureFacts, limits_hit: tuple[str, ...]) -> FailureFacts:
    """``facts`` as a ``resource-limit`` failure when the tree ran into a limit, else unchanged.

    The stage, exit code and signal stay: the limit is why the product ended, not where.
    """
    if not limits_hit:
        return facts
    return FailureFacts(
        facts.product,
        facts.stage,
        RESOURCE_LIMIT_CATEGORY,
        exit_code=facts.exit_code,
        signal=facts.signal,
        limit=limits_hit[0],
    )


def bound_diagnostic(text: str) -> str:
    """Bound ``text`` to :data:`MAX_DIAGNOSTIC_BYTES` UTF-8 bytes.

    Text that fits is returned unchanged. Longer text keeps the longest prefix that fits together
    with ``"\\n[diagnostic truncated]"``; a multibyte sequence is never split. Lone surrogates
    (which cannot be encoded) are replaced by ``"?"``.
    """
    if len(text) * 4 <= MAX_DIAGNOSTIC_BYTES and text.isascii():
        return text
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:
        encoded = text.encode("utf-8", errors="replace")
        text = encoded.decode("utf-8")
    if len(encoded) <= MAX_DIAGNOSTIC_BYTES:
        return text
    head = encoded[: MAX_DIAGNOSTIC_BYTES - _MARKER_BYTES]
    # The source is valid UTF-8, so only the cut at the end can be an incomplete sequence.
    return head.decode("utf-8", errors="ignore") + _TRUNCATION_MARKER
