"""Reads Claude Code's result message (usage, model_usage, cost) into UsageFacts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from claude_agent_sdk import RateLimitInfo, ResultMessage

from dsh.subagent.kit import UsageFacts, non_negative_int

__all__ = ["StreamedUsage", "rate_limit_facts", "usage_from_result"]

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


#: The window each ``rateLimitType`` names, in minutes (``overage`` names none).
_WINDOW_MINUTES = {
    "five_hour": 300,
    "seven_day": 10080,
    "seven_day_opus": 10080,
    "seven_day_sonnet": 10080,
}


def rate_limit_facts(info: RateLimitInfo) -> dict[str, Any]:
    """A ``rate_limit_event``'s facts, as ``UsageFacts`` fields.

    ``utilization`` (a fraction) is stated as a percentage, the window is the one its
    ``rateLimitType`` names, and a ``rejected`` status reports that type as the limit reached.
    Anything malformed reads as unknown.
    """
    facts: dict[str, Any] = {}
    utilization = info.utilization
    if (
        isinstance(utilization, int | float)
        and not isinstance(utilization, bool)
        and 0 <= utilization <= 10
    ):
        facts["rate_limit_used_percent"] = round(float(utilization) * 100, 4)
    kind = info.rate_limit_type if isinstance(info.rate_limit_type, str) else None
    if kind in _WINDOW_MINUTES:
        facts["rate_limit_window_minutes"] = _WINDOW_MINUTES[kind]
    resets = info.resets_at
    if isinstance(resets, int | float) and not isinstance(resets, bool) and 0 <= resets < 2**53:
        facts["rate_limit_resets_at"] = int(resets)
    if info.status == "rejected":
        facts["rate_limit_reached"] = (kind or "rejected")[:64]
    return facts


def usage_from_result(message: ResultMessage, model_requests: int | None) -> UsageFacts:
    """The run's facts: summed over ``model_usage`` where present (it includes subagent tokens
    that ``usage`` leaves out), else ``usage``; the cost is ``total_cost_usd`` as stated."""
    counts: dict[str, Any] = _summed(message.model_usage, _MODEL_KEYS) or _from_usage(message.usage)
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


class StreamedUsage:
    """What the run has spent so far, from each model response's ``usage`` as it streams.

    The result message states the run's totals only at its end; a caller's spend caps need them
    per response. Each response is keyed by its message id: ``message_start`` carries its input
    counts (and a first output count), ``message_delta`` its cumulative output count, and every
    assistant message repeats the usage known then. Per response the largest count seen is kept;
    the facts are the sums over responses (subagents' responses included, as ``model_usage``
    does). The result's own figures replace these when it arrives.
    """

    __slots__ = ("_current", "_responses")

    def __init__(self) -> None:
        self._responses: dict[str, dict[str, int]] = {}
        self._current: dict[str | None, str] = {}  # the streaming response per (sub)agent

    def stream_event(self, event: Mapping[str, Any], parent: str | None) -> bool:
        """Read one raw API stream event; whether the counts grew."""
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message")
            if not isinstance(message, Mapping) or not isinstance(message.get("id"), str):
                return False
            self._current[parent] = message["id"]
            return self.merge(message["id"], message.get("usage"))
        if kind == "message_delta":
            current = self._current.get(parent)
            return current is not None and self.merge(current, event.get("usage"))
        return False

    def merge(self, message_id: str | None, usage: Any) -> bool:
        """Take one response's ``usage`` (an assistant message's); whether the counts grew."""
        if message_id is None or not isinstance(usage, Mapping):
            return False
        counts = self._responses.setdefault(message_id, {})
        grew = False
        for fact, key in _USAGE_KEYS.items():
            value = non_negative_int(usage, key)
            if value is not None and value > counts.get(fact, -1):
                counts[fact] = value
                grew = True
        return grew

    def facts(self) -> UsageFacts:
        """The sums over the responses seen so far."""
        sums: dict[str, Any] = {}
        for fact in _USAGE_KEYS:
            known = [counts[fact] for counts in self._responses.values() if fact in counts]
            sums[fact] = sum(known) if known else None
        return UsageFacts(**sums, model_requests=len(self._responses) or None)
