"""Claude Code's result is read from ``model_usage`` (subagents included), cost as stated."""

from __future__ import annotations

from typing import Any

from claude_agent_sdk import ResultMessage

from dsh.subagent import UsageFacts
from dsh.subagent_claude_code._usage import usage_from_result


def _result(usage: dict[str, Any] | None, model_usage: Any, cost: float | None) -> ResultMessage:
    return ResultMessage(
        subtype="success",
        duration_ms=1,
        duration_api_ms=1,
        is_error=False,
        num_turns=2,
        session_id="s",
        total_cost_usd=cost,
        usage=usage,
        model_usage=model_usage,
    )


_USAGE = {
    "input_tokens": 10,
    "output_tokens": 5,
    "cache_read_input_tokens": 3,
    "cache_creation_input_tokens": 4,
}


def _model(inputs: int, outputs: int, reads: int, writes: int, window: int) -> dict[str, Any]:
    return {
        "inputTokens": inputs,
        "outputTokens": outputs,
        "cacheReadInputTokens": reads,
        "cacheCreationInputTokens": writes,
        "webSearchRequests": 0,
        "costUSD": 0.0,
        "contextWindow": window,
        "maxOutputTokens": 32000,
    }


def test_model_usage_wins_over_usage_because_it_counts_subagents() -> None:
    # The main model's entry equals ``usage``; a subagent's model adds tokens ``usage`` leaves out.
    models = {"main": _model(10, 5, 3, 4, 200000), "sub": _model(100, 50, 30, 40, 1000000)}
    facts = usage_from_result(_result(_USAGE, models, 0.0123), model_requests=2)
    assert facts == UsageFacts(
        input_tokens=10 + 100,  # main + sub
        cached_input_tokens=3 + 30,
        cache_creation_input_tokens=4 + 40,
        output_tokens=5 + 50,
        context_window=1000000,  # the larger window
        cost_usd=0.0123,
        model_requests=2,
    )


def test_usage_is_the_fallback_without_model_usage() -> None:
    facts = usage_from_result(_result(_USAGE, None, None), model_requests=None)
    assert facts == UsageFacts(
        input_tokens=10, cached_input_tokens=3, cache_creation_input_tokens=4, output_tokens=5
    )
    assert usage_from_result(_result(None, {}, None), None) == UsageFacts()


def test_rate_limit_event_facts() -> None:
    from claude_agent_sdk import RateLimitInfo

    from dsh.subagent_claude_code._usage import rate_limit_facts

    info = RateLimitInfo(
        status="rejected", resets_at=1900000000, rate_limit_type="five_hour", utilization=0.91
    )
    assert rate_limit_facts(info) == {
        "rate_limit_used_percent": 91.0,
        "rate_limit_window_minutes": 300,
        "rate_limit_resets_at": 1900000000,
        "rate_limit_reached": "five_hour",
    }
    assert rate_limit_facts(RateLimitInfo(status="allowed", utilization=True)) == {}
