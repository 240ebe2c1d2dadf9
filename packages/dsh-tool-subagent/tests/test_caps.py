"""The caller's spend caps with scripted providers: config rules, the texts, the check per report.

The real-product proofs (both products, an endless tool loop, every surface) are in
tests-e2e/test_caps_real.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from dsh.jobs import JobRegistry
from dsh.subagent import (
    Capabilities,
    ResolvedStartRequest,
    StopReason,
    SubagentResult,
    SubagentService,
    UsageFacts,
)
from dsh.subagent.testing import FakeProvider, FakeRun
from dsh.tool_subagent import Caller, Harness, SubagentTool, SubagentToolConfig
from dsh.tool_subagent._limits import DEFAULT_MAX_TOTAL_TOKENS, RunLimits, limit_text
from dsh.tool_subagent.errors import MountError, ProfileError

CALLER = Caller(session_id="s1", cwd="/tmp")
ARGS = {"description": "d", "prompt": "p"}


class Spending(FakeProvider):
    """Runs that report ``step`` more output tokens every ``every`` s and never answer."""

    def __init__(self, *args: Any, step: int, every: float = 0.01, **kwargs: Any) -> None:
        super().__init__(*args, delay=None, **kwargs)
        self.step, self.every = step, every
        self.reports: list[int] = []

    async def start(self, request: ResolvedStartRequest) -> Any:
        return _Spender(await super().start(request), self)


class _Spender:
    def __init__(self, run: FakeRun, provider: Spending) -> None:
        self._run, self._provider = run, provider
        self._watches: list[Callable[[UsageFacts], None]] = []
        self.usage: UsageFacts | None = None
        self._task = asyncio.create_task(self._spend())

    async def _spend(self) -> None:
        spent = 0
        while not self._run.settled:
            await asyncio.sleep(self._provider.every)
            spent += self._provider.step
            self._provider.reports.append(spent)
            self.usage = UsageFacts(output_tokens=spent, total_tokens=spent)
            for watch in tuple(self._watches):
                watch(self.usage)

    def watch_usage(self, callback: Callable[[UsageFacts], None]) -> Callable[[], None]:
        self._watches.append(callback)
        return lambda: self._watches.remove(callback)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._run, name)


def test_defaults_bound_every_run_by_tokens() -> None:
    config = SubagentToolConfig(provider="fake")
    assert config.max_total_tokens == DEFAULT_MAX_TOTAL_TOKENS == 50_000_000
    assert (config.max_output_tokens, config.max_cost_usd) == (None, None)
    assert config.limits.max_total_tokens == 50_000_000


def test_cap_texts_are_fixed() -> None:
    assert limit_text("max_total_tokens", 200000) == (
        "subagent run stopped: 200000 tokens spent (max_total_tokens)"
    )
    assert limit_text("max_total_tokens", 50_000_000) == (
        "subagent run stopped: 50000000 tokens spent (max_total_tokens)"
    )
    assert limit_text("max_output_tokens", 800) == (
        "subagent run stopped: 800 output tokens spent (max_output_tokens)"
    )
    assert limit_text("max_cost_usd", 2.5) == "subagent run stopped: 2.5 USD spent (max_cost_usd)"
    assert limit_text("max_cost_usd", 3.0) == "subagent run stopped: 3 USD spent (max_cost_usd)"


def test_a_cap_is_crossed_on_each_products_own_figures() -> None:
    limits = RunLimits(max_total_tokens=1000, max_output_tokens=100, max_cost_usd=1.0)
    assert limits.crossed(None) is None
    # Codex states a total (its input includes its cached input).
    assert limits.crossed(UsageFacts(input_tokens=990, total_tokens=999)) is None
    assert limits.crossed(UsageFacts(total_tokens=1000)) == ("max_total_tokens", 1000)
    # Claude Code states parts that exclude each other: they are summed.
    parts = UsageFacts(input_tokens=400, cached_input_tokens=400, cache_creation_input_tokens=150)
    assert limits.crossed(parts) is None
    assert limits.crossed(UsageFacts(**{**_facts(parts), "output_tokens": 50})) == (
        "max_total_tokens",
        1000,
    )
    assert limits.crossed(UsageFacts(output_tokens=100)) == ("max_output_tokens", 100)
    assert limits.crossed(UsageFacts(cost_usd=1.25)) == ("max_cost_usd", 1.0)
    assert RunLimits(max_total_tokens=None).crossed(UsageFacts(total_tokens=10**12)) is None


def _facts(usage: UsageFacts) -> dict[str, Any]:
    return usage.as_json()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_total_tokens", 0),
        ("max_total_tokens", 1.5),
        ("max_total_tokens", "100"),
        ("max_total_tokens", True),
        ("max_output_tokens", -1),
        ("max_cost_usd", 0),
        ("max_cost_usd", float("inf")),
        ("max_cost_usd", "1"),
    ],
)
def test_bad_caps_are_profile_errors_naming_the_field(field: str, value: object) -> None:
    profile = {"provider": [{"kind": "fake"}], "tool": [{"provider": "fake", field: value}]}
    with pytest.raises(ProfileError, match=rf"tool\[0\]\.{field}"):
        Harness.from_profile(profile)


def test_max_cost_usd_needs_a_provider_that_enforces_a_cost_cap() -> None:
    service = SubagentService()
    service.register(FakeProvider("plain"))
    service.register(FakeProvider("costed", capabilities=Capabilities(cost_limit=True)))
    with pytest.raises(MountError, match="cannot enforce max_cost_usd") as caught:
        SubagentTool(SubagentToolConfig(provider="plain", max_cost_usd=1.0), service, JobRegistry())
    assert caught.value.field == "max_cost_usd"
    tool = SubagentTool(
        SubagentToolConfig(provider="costed", max_cost_usd=1.0), service, JobRegistry()
    )
    assert tool.config.limits.max_cost_usd == 1.0


async def test_max_cost_usd_reaches_the_provider_in_the_request() -> None:
    service = SubagentService()
    provider = FakeProvider("costed", capabilities=Capabilities(cost_limit=True))
    service.register(provider)
    config = SubagentToolConfig(provider="costed", max_cost_usd=0.75)
    result = await SubagentTool(config, service, JobRegistry()).call(ARGS, CALLER)
    assert not result.is_error
    assert [request.max_cost_usd for request in provider.requests] == [0.75]


async def test_the_report_that_crosses_a_cap_stops_the_run_with_the_fixed_text() -> None:
    service = SubagentService()
    provider = Spending("fake", step=30)
    service.register(provider)
    config = SubagentToolConfig(provider="fake", max_output_tokens=100)
    result = await SubagentTool(config, service, JobRegistry()).call(ARGS, CALLER)
    assert result.is_error
    assert result.text == "subagent run stopped: 100 output tokens spent (max_output_tokens)"
    assert result.value == {
        "stop_reason": "aborted",
        "diagnostic": None,
        "limit": "max_output_tokens",
    }
    assert result.meta is not None
    assert result.meta["usage"]["output_tokens"] == 120  # the report that crossed, no later one
    await asyncio.sleep(0.05)
    assert provider.reports == [30, 60, 90, 120]


async def test_an_answer_whose_result_reports_a_spend_past_a_cap_is_kept() -> None:
    # A product that states its spend only with its result: a completed answer stays an answer.
    service = SubagentService()
    service.register(FakeProvider("fake", usage=UsageFacts(total_tokens=10**9)))
    result = await SubagentTool(SubagentToolConfig(provider="fake"), service, JobRegistry()).call(
        ARGS, CALLER
    )
    assert not result.is_error


async def test_a_failed_run_whose_result_is_past_the_cost_cap_names_the_cap() -> None:
    # Claude Code ends a run past --max-budget-usd itself, as an error with its cost.
    service = SubagentService()
    failed = SubagentResult(StopReason.ERROR, (), "Product subagent failure (budget-limit)")
    service.register(
        FakeProvider(
            "fake",
            result=failed,
            usage=UsageFacts(cost_usd=0.8),
            capabilities=Capabilities(cost_limit=True),
        )
    )
    config = SubagentToolConfig(provider="fake", max_cost_usd=0.5)
    result = await SubagentTool(config, service, JobRegistry()).call(ARGS, CALLER)
    assert result.text == "subagent run stopped: 0.5 USD spent (max_cost_usd)"
    assert result.meta is not None
    assert result.meta["usage"]["cost_usd"] == 0.8
