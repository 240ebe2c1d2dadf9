"""Usage facts: what a product reported a run spent, for the host only (never model-visible)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["RunTimings", "UsageFacts", "UsageWatch", "watch_usage"]

UsageWatch = Callable[["UsageFacts"], None]
"""Called with a run's usage facts each time its product reports them (host-side only)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageFacts:
    """Token counts and cost as the product stated them; ``None`` where it stated nothing.

    Each count is the product's own number, unchanged: Codex's ``inputTokens`` includes its
    ``cachedInputTokens``, Claude Code's ``input_tokens`` excludes cache reads and cache writes.
    ``cost_usd`` is only ever the product's own figure.
    """

    input_tokens: int | None = None
    cached_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_output_tokens: int | None = None
    total_tokens: int | None = None
    context_window: int | None = None
    cost_usd: float | None = None
    model_requests: int | None = None
    #: The account's rate-limit state as the product last reported it (docs/usage-facts.md):
    #: the share of the window used (0-100), the window, when it resets (Unix seconds), and the
    #: product's own word for a limit that was reached.
    rate_limit_used_percent: float | None = None
    rate_limit_window_minutes: int | None = None
    rate_limit_resets_at: int | None = None
    rate_limit_reached: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The facts as a JSON object, omitting unknown ones."""
        return {key: value for key, value in asdict(self).items() if value is not None}


@dataclass(frozen=True, slots=True, kw_only=True)
class RunTimings:
    """dsh's own stamps of a run, in seconds since the caller asked for it; ``None`` if never
    reached or unknown.

    ``started_s``: the run was published (the product is up and has its task);
    ``first_activity_s``: the product's first message after that; ``answer_s``: the result
    settled; ``tree_exit_s``: the close proved the product's whole process tree gone.
    """

    started_s: float | None = None
    first_activity_s: float | None = None
    answer_s: float | None = None
    tree_exit_s: float | None = None

    def as_json(self) -> dict[str, Any]:
        """The timings as a JSON object, omitting stages never reached."""
        return {key: value for key, value in asdict(self).items() if value is not None}


def non_negative_int(payload: Mapping[str, Any], key: str) -> int | None:
    """``payload[key]`` if it is a non-negative integer (not a bool), else ``None``."""
    value = payload.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def watch_usage(run: object, callback: UsageWatch) -> Callable[[], None] | None:
    """Call ``callback`` with ``run``'s facts each time its product reports usage.

    Returns the function that stops the calls, or ``None`` when the run offers no usage reports
    as they happen (a third-party run written before them): a caller's spend caps then read the
    facts only at the result. ``callback`` runs on the event loop, in the provider's reading
    path: it must be quick and must not raise.
    """
    watch = getattr(run, "watch_usage", None)
    if not callable(watch):
        return None
    stop = watch(callback)
    return stop if callable(stop) else None
