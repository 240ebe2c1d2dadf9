"""Real Claude Code: the run's usage facts are the loopback server's token counts and its cost."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent import StopReason, UsageFacts
from dsh.subagent_claude_code.testing import SAMPLE_USAGE, SAMPLE_USAGE_FACTS, FakeMessagesServer

pytestmark = pytest.mark.real_product


async def test_one_request_reports_the_servers_counts(
    server: FakeMessagesServer, make_provider: Any, make_request: Any, workspace: Path
) -> None:
    server.usage = dict(SAMPLE_USAGE)
    server.queue_text("done")
    provider = make_provider(model="claude-sonnet-5-5", env={"ANTHROPIC_API_KEY": "sk-ant-k1"})
    run = await provider.start(make_request("count", workspace))
    published = time.monotonic()
    assert run.first_activity is None  # the model has not answered yet
    result = await run.result()
    await run.aclose()
    # The first assistant message came after the prompt and no later than the result.
    assert run.first_activity is not None
    assert published < run.first_activity <= time.monotonic()
    assert result.stop_reason == StopReason.COMPLETED
    assert result.text == "done"
    assert len(server.requests) == 1
    # Measured with the pinned CLI: counts pass through ``model_usage``; the cost is the CLI's own
    # (its price table for the model), the window its own for the model.
    assert run.usage == UsageFacts(**SAMPLE_USAGE_FACTS, context_window=1000000, cost_usd=0.0001358)
