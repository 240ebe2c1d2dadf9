"""The conformance kit passes for FakeProvider and fails for broken providers."""

from __future__ import annotations

import pytest

from dsh.subagent import (
    Parent,
    ResolvedStartRequest,
    StopReason,
    SubagentResult,
    SubagentStartRequest,
    TextBlock,
)
from dsh.subagent.kit import FailureFacts
from dsh.subagent.testing import BareRun, FakeProvider, FakeRun, run_provider_conformance


def _request() -> SubagentStartRequest:
    return SubagentStartRequest([TextBlock("answer me")], Parent("s", "/tmp"))


class _Routed(FakeProvider):
    """Completes, fails or stalls by task text, like a real provider behind a scripted model."""

    async def start(self, request: ResolvedStartRequest) -> FakeRun:
        text = "".join(b.text for b in request.prompt if isinstance(b, TextBlock))
        self.failure = FailureFacts("Codex", "turn", "other") if text == "fail" else None
        self.delay = None if text == "stall" else 0.01
        return await super().start(request)


def _named(text: str) -> SubagentStartRequest:
    return SubagentStartRequest([TextBlock(text)], Parent("s", "/tmp"))


async def test_fake_provider_conforms() -> None:
    leaks: list[int] = []
    providers: list[_Routed] = []

    def make() -> _Routed:
        providers.append(_Routed("fake"))
        return providers[-1]

    def after_each() -> None:
        leaks.append(len(providers[-1].open_runs))

    report = await run_provider_conformance(
        make,
        make_request=lambda: _named("ok"),
        make_failing_request=lambda: _named("fail"),
        make_long_request=lambda: _named("stall"),
        after_each=after_each,
        step_timeout=5,
    )
    assert "cancel_wins_at_once" in report.passed
    assert "cancel_mid_run" in report.passed
    assert "fails_safely" in report.passed
    assert "reports_activity" in report.passed
    assert len(report.passed) == 11
    assert leaks == [0] * 11


class _ResultRaises(FakeProvider):
    async def start(self, request: ResolvedStartRequest) -> FakeRun:
        run = await super().start(request)

        async def result() -> SubagentResult:
            raise RuntimeError("child died")

        run.result = result  # type: ignore[method-assign]
        return run


class _AnswerBeatsCancel(FakeProvider):
    """Settles the answer inside start(), so a later cancel() cannot win."""

    async def start(self, request: ResolvedStartRequest) -> FakeRun:
        run = await super().start(request)
        run.finish()
        return run


class _DiagnosticOnSuccess(FakeProvider):
    async def start(self, request: ResolvedStartRequest) -> FakeRun:
        run = await super().start(request)

        async def result() -> SubagentResult:
            plain = SubagentResult(StopReason.COMPLETED, (TextBlock("x"),))
            object.__setattr__(plain, "diagnostic", "leaked")
            return plain

        run.result = result  # type: ignore[method-assign]
        return run


class _NoActivity(FakeProvider):
    """A third-party run written before the activity stamp: it has no ``last_activity``."""

    async def start(self, request: ResolvedStartRequest) -> FakeRun:
        run = await super().start(request)
        stampless = BareRun(run)
        return stampless  # type: ignore[return-value]


class _Frozen:
    def __init__(self, last: float) -> None:
        self.last = last

    def touch(self) -> None:
        pass


class _FrozenActivity(FakeProvider):
    """A run whose stamp never moves after start (it forgot to touch it per message)."""

    async def start(self, request: ResolvedStartRequest) -> FakeRun:
        run = await super().start(request)
        run._activity = _Frozen(run.last_activity)  # type: ignore[assignment]
        return run


@pytest.mark.parametrize(
    ("broken", "expected"),
    [
        (_FrozenActivity, "reports_activity: last_activity did not move"),
        (_ResultRaises, "result() raised RuntimeError"),
        (_AnswerBeatsCancel, "local cancel must win"),
        (_DiagnosticOnSuccess, "a completed result must have no diagnostic"),
    ],
)
async def test_broken_provider_fails(broken: type[FakeProvider], expected: str) -> None:
    with pytest.raises(AssertionError) as info:
        await run_provider_conformance(
            lambda: broken("broken"), make_request=_request, step_timeout=2
        )
    assert expected in str(info.value)
    assert "violates the subagent contract" in str(info.value)


async def test_a_run_without_the_stamp_fails_only_the_activity_check() -> None:
    # A third-party provider written before the stamp still runs (the stall limit cannot apply
    # to it); the kit names what it lacks.
    with pytest.raises(AssertionError) as info:
        await run_provider_conformance(
            lambda: _NoActivity("old", delay=0.01), make_request=_request, step_timeout=2
        )
    lines = str(info.value).splitlines()[1:]
    assert [line.split(":")[0].strip() for line in lines] == ["reports_activity"]
    assert "run.last_activity must be the time.monotonic()" in lines[0]


async def test_awaiter_cancel_that_cancels_run_fails() -> None:
    class CancelsOnAwaiterCancel(FakeProvider):
        async def start(self, request: ResolvedStartRequest) -> FakeRun:
            run = await super().start(request)
            original = run.result

            async def result() -> SubagentResult:
                try:
                    return await original()
                except BaseException:
                    run.cancel()
                    raise

            run.result = result  # type: ignore[method-assign]
            return run

    with pytest.raises(AssertionError, match="awaiter_cancel_keeps_run"):
        await run_provider_conformance(
            lambda: CancelsOnAwaiterCancel("c", delay=0.05), make_request=_request, step_timeout=2
        )


async def test_failing_request_without_diagnostic_fails() -> None:
    with pytest.raises(AssertionError, match="must not complete"):
        await run_provider_conformance(
            lambda: FakeProvider("f"),
            make_request=_request,
            make_failing_request=_request,
            step_timeout=2,
        )


async def test_plain_fake_provider_conforms() -> None:
    report = await run_provider_conformance(
        lambda: FakeProvider("plain"), make_request=_request, step_timeout=5
    )
    assert report.passed[0] == "shape"
    assert "awaiter_cancel_keeps_run" in report.passed
