"""Reads Codex's cumulative ``thread/tokenUsage/updated`` notification into :class:`UsageFacts`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh.subagent.kit import UsageFacts, non_negative_int

__all__ = ["rate_limit_facts", "usage_from_token_usage"]


def usage_from_token_usage(params: Mapping[str, Any], model_requests: int | None) -> UsageFacts:
    """The facts in ``params.tokenUsage``: its cumulative ``total`` (never ``last``, one request's).

    Missing or malformed fields read as unknown rather than failing the run: usage is a fact for
    the bill, never a reason to lose an answer.
    """
    usage = params.get("tokenUsage")
    if not isinstance(usage, Mapping):
        return UsageFacts(model_requests=model_requests)
    total = usage.get("total")
    total = total if isinstance(total, Mapping) else {}
    return UsageFacts(
        input_tokens=non_negative_int(total, "inputTokens"),
        cached_input_tokens=non_negative_int(total, "cachedInputTokens"),
        output_tokens=non_negative_int(total, "outputTokens"),
        reasoning_output_tokens=non_negative_int(total, "reasoningOutputTokens"),
        total_tokens=non_negative_int(total, "totalTokens"),
        context_window=non_negative_int(usage, "modelContextWindow"),
        model_requests=model_requests,
    )


def rate_limit_facts(params: Mapping[str, Any]) -> dict[str, Any]:
    """The ``account/rateLimits/updated`` notification's facts, as ``UsageFacts`` fields.

    Of the primary and secondary windows, the one with the larger ``usedPercent`` is kept (the
    one nearer its limit); ``rateLimitReachedType`` is kept as Codex names it. Anything
    malformed reads as unknown.
    """
    limits = params.get("rateLimits")
    if not isinstance(limits, Mapping):
        return {}
    windows = [
        window
        for key in ("primary", "secondary")
        if isinstance(window := limits.get(key), Mapping)
        and isinstance(window.get("usedPercent"), int | float)
        and not isinstance(window.get("usedPercent"), bool)
    ]
    facts: dict[str, Any] = {}
    if windows:
        window = max(windows, key=lambda item: float(item["usedPercent"]))
        facts["rate_limit_used_percent"] = float(window["usedPercent"])
        facts["rate_limit_window_minutes"] = non_negative_int(window, "windowDurationMins")
        facts["rate_limit_resets_at"] = non_negative_int(window, "resetsAt")
    reached = limits.get("rateLimitReachedType")
    if isinstance(reached, str) and reached:
        facts["rate_limit_reached"] = reached[:64]
    return {key: value for key, value in facts.items() if value is not None}
