"""Reads Claude Code's result message (usage, model_usage, cost) into UsageFacts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from claude_agent_sdk import ResultMessage

from dsh.subagent.kit import UsageFacts, non_negative_int

__all__ = ["usage_from_result"]

# ``model_usage`` key per fact; it counts every model the run used (subagents included).
_MODEL_KEYS = {
    "input_tokens": "inputTokens",
    "cached_input_tokens": "cacheReadInputTokens",
    "cache_creation_input_tokens": "cacheCreationInputTokens",
    "output_tokens": "outputTokens",
}
# ``usage`` key per fact; it counts the main loop's model only.
_USAGE_KEYS = {
    "input_tokens": "input_tokens",
    "cached_input_tokens": "cache_read_input_tokens",
    "cache_creation_input_tokens": "cache_creation_input_tokens",
    "output_tokens": "output_tokens",
}


def usage_from_result(message: ResultMessage, model_requests: int | None) -> UsageFacts:
    """The run's facts: summed over ``model_usage`` where present (it includes subagent tokens
    that ``usage`` leaves out), else ``usage``; the cost is ``total_cost_usd`` as stated."""
    counts = _summed(message.model_usage, _MODEL_KEYS) or _from_usage(message.usage)
    windows = [
        window
        for entry in (message.model_usage or {}).values()
        if isinstance(entry, Mapping)
        and (window := non_negative_int(entry, "contextWindow")) is not None
    ]
    cost = message.total_cost_usd
    return UsageFacts(
        **counts,
        context_window=max(windows) if windows else None,
        cost_usd=float(cost)
        if isinstance(cost, int | float) and not isinstance(cost, bool)
        else None,
        model_requests=model_requests,
    )


def _summed(
    model_usage: Mapping[str, Any] | None, keys: Mapping[str, str]
) -> dict[str, int | None]:
    entries = [entry for entry in (model_usage or {}).values() if isinstance(entry, Mapping)]
    if not entries:
        return {}
    sums: dict[str, int | None] = {}
    for fact, key in keys.items():
        values = [non_negative_int(entry, key) for entry in entries]
        known = [value for value in values if value is not None]
        sums[fact] = sum(known) if known else None
    return sums


def _from_usage(usage: Mapping[str, Any] | None) -> dict[str, int | None]:
    usage = usage if isinstance(usage, Mapping) else {}
    return {fact: non_negative_int(usage, key) for fact, key in _USAGE_KEYS.items()}
