"""Codex's ``thread/tokenUsage/updated`` is read as its cumulative ``total``, never ``last``."""

from __future__ import annotations

from dsh.subagent import UsageFacts
from dsh.subagent_codex._usage import rate_limit_facts, usage_from_token_usage

# The shape codex app-server 0.163.0 sends (field names from its protocol), numbers chosen apart.
_PARAMS = {
    "threadId": "t",
    "turnId": "u",
    "tokenUsage": {
        "total": {
            "totalTokens": 1500,
            "inputTokens": 1200,
            "cachedInputTokens": 300,
            "outputTokens": 300,
            "reasoningOutputTokens": 40,
        },
        "last": {
            "totalTokens": 7,
            "inputTokens": 5,
            "cachedInputTokens": 1,
            "outputTokens": 2,
            "reasoningOutputTokens": 0,
        },
        "modelContextWindow": 272000,
    },
}


def test_the_total_is_taken_not_the_last_request() -> None:
    facts = usage_from_token_usage(_PARAMS, model_requests=3)
    assert facts == UsageFacts(
        input_tokens=1200,
        cached_input_tokens=300,
        output_tokens=300,
        reasoning_output_tokens=40,
        total_tokens=1500,
        context_window=272000,
        model_requests=3,
    )
    assert facts.cost_usd is None  # Codex states no cost; dsh never computes one


def test_malformed_usage_reads_as_unknown_not_as_a_failure() -> None:
    bad = {"tokenUsage": {"total": {"inputTokens": -1, "outputTokens": True, "totalTokens": "9"}}}
    assert usage_from_token_usage(bad, None) == UsageFacts()
    assert usage_from_token_usage({}, 2) == UsageFacts(model_requests=2)
    assert usage_from_token_usage({}, None).as_json() == {}


def test_rate_limit_facts_keep_the_window_nearer_its_limit() -> None:
    params = {
        "rateLimits": {
            "primary": {"usedPercent": 42.5, "windowDurationMins": 300, "resetsAt": 1893456000},
            "secondary": {"usedPercent": 7, "windowDurationMins": 10080, "resetsAt": 1894000000},
            "rateLimitReachedType": "rate_limit_reached",
        }
    }
    assert rate_limit_facts(params) == {
        "rate_limit_used_percent": 42.5,
        "rate_limit_window_minutes": 300,
        "rate_limit_resets_at": 1893456000,
        "rate_limit_reached": "rate_limit_reached",
    }
    assert rate_limit_facts({}) == {}
    assert rate_limit_facts({"rateLimits": {"primary": {"usedPercent": True}}}) == {}
