"""Reads Codex's cumulative ``thread/tokenUsage/updated`` notification into :class:`UsageFacts`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh.subagent.kit import UsageFacts, non_negative_int

__all__ = ["usage_from_token_usage"]


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
