"""Real Codex: the run's usage facts are the loopback server's token counts, as Codex sums them."""

from __future__ import annotations

import time
from typing import Any as Env

import pytest

from dsh.subagent import StopReason, UsageFacts
from dsh.subagent_codex.testing import SAMPLE_USAGE

pytestmark = pytest.mark.real_product


def _sample_usage_times(requests: int) -> UsageFacts:
    """The facts of ``requests`` model responses that each reported ``SAMPLE_USAGE`` (1,000 in,
    200 of them cached, 30 out, 7 of them reasoning), in the model's 258,400-token window; one
    ``tokenUsage`` notification per model response."""
    return UsageFacts(
        input_tokens=1000 * requests,
        cached_input_tokens=200 * requests,
        output_tokens=30 * requests,
        reasoning_output_tokens=7 * requests,
        total_tokens=1030 * requests,
        context_window=258400,
        model_requests=requests,
    )


async def test_one_request_reports_the_servers_counts(codex_env: Env) -> None:
    codex_env.server.usage = dict(SAMPLE_USAGE)
    codex_env.server.queue_text("done", phase="final_answer")
    async with await codex_env.provider().start(codex_env.request("count")) as run:
        published = time.monotonic()
        result = await run.result()
        # The turn's first model item came after publication (the echoed prompt does not count).
        assert run.first_activity is not None
        assert published < run.first_activity <= time.monotonic()
    assert result.stop_reason is StopReason.COMPLETED
    assert result.text == "done"
    assert len(codex_env.server.requests) == 1
    # Measured: Codex passes the Responses usage through; the window is its own for the model.
    assert run.usage == _sample_usage_times(1)


async def test_two_requests_are_summed_by_codex(codex_env: Env) -> None:
    codex_env.server.usage = dict(SAMPLE_USAGE)
    command = {"cmd": "true", "login": False, "yield_time_ms": 20000}
    codex_env.server.queue_tool_call("exec_command", command)
    codex_env.server.queue_text("done", phase="final_answer")
    provider = codex_env.provider(permission_mode="dangerously-bypass-approvals-and-sandbox")
    async with await provider.start(codex_env.request("count")) as run:
        result = await run.result()
    assert result.text == "done"
    assert len(codex_env.server.requests) == 2
    # ``tokenUsage.total`` is cumulative: twice the server's counts, not the last request's.
    assert run.usage == _sample_usage_times(2)
