"""``run_provider_conformance``: the seam's contract, checked against any provider."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from dsh.subagent._activity import last_activity
from dsh.subagent._diagnostics import MAX_DIAGNOSTIC_BYTES
from dsh.subagent._types import (
    Capabilities,
    Descriptor,
    ResolvedStartRequest,
    StopReason,
    SubagentProvider,
    SubagentResult,
    SubagentRun,
    SubagentStartRequest,
    TextBlock,
)

__all__ = ["ConformanceReport", "run_provider_conformance"]

RequestFactory = Callable[[], SubagentStartRequest]
Hook = Callable[[], Awaitable[None] | None]


class _Violation(AssertionError):
    pass


@dataclass
class ConformanceReport:
    """The checks that passed, in order."""

    passed: list[str] = field(default_factory=list)


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise _Violation(message)


def _resolve(provider: SubagentProvider, request: SubagentStartRequest) -> ResolvedStartRequest:
    if isinstance(request, ResolvedStartRequest):
        return request
    return ResolvedStartRequest.from_request(
        request, Descriptor(provider=provider.name, label=request.label)
    )


async def _result(run: SubagentRun, limit: float, what: str) -> SubagentResult:
    try:
        async with asyncio.timeout(limit):
            result = await run.result()
    except TimeoutError:
        raise _Violation(f"result() did not settle within {limit:g}s {what}") from None
    except asyncio.CancelledError:
        raise
    except Exception as error:
        raise _Violation(f"result() raised {type(error).__name__} {what}") from error
    _check(isinstance(result, SubagentResult), f"result() returned a non-SubagentResult {what}")
    _check(
        isinstance(result.output, tuple) and all(isinstance(b, TextBlock) for b in result.output),
        f"result().output must be a tuple of TextBlock {what}",
    )
    if result.diagnostic is not None:
        size = len(result.diagnostic.encode("utf-8", errors="replace"))
        _check(size <= MAX_DIAGNOSTIC_BYTES, f"diagnostic is {size} bytes (> 4096) {what}")
    return result


def _check_aborted(result: SubagentResult, what: str) -> None:
    _check(
        result.stop_reason == StopReason.ABORTED,
        f"expected aborted {what}, got {result.stop_reason!s} (local cancel must win)",
    )
    _check(result.diagnostic is None, f"an aborted result must have no diagnostic {what}")
    _check(result.output == (), f"an aborted result must have empty output {what}")


class _Suite:
    def __init__(
        self,
        make_provider: Callable[[], SubagentProvider],
        make_request: RequestFactory,
        make_failing_request: RequestFactory | None,
        make_long_request: RequestFactory | None,
        after_each: Hook | None,
        timeout: float,
        settle_timeout: float,
        cancel_after: float,
    ) -> None:
        self.make_provider = make_provider
        self.make_request = make_request
        self.make_failing_request = make_failing_request
        self.make_long_request = make_long_request
        self.after_each = after_each
        self.timeout = timeout
        self.settle_timeout = settle_timeout
        self.cancel_after = cancel_after
        self.provider = make_provider()
        self.runs: list[SubagentRun] = []
        self.ids: set[str] = set()

    async def start(self, factory: RequestFactory) -> SubagentRun:
        request = _resolve(self.provider, factory())
        try:
            run = await self.provider.start(request)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            raise _Violation(f"start() raised {type(error).__name__}") from error
        self.runs.append(run)
        _check(isinstance(run, SubagentRun), "start() must return a SubagentRun")
        _check(isinstance(run.id, str) and bool(run.id), "run.id must be a non-empty string")
        _check(run.id not in self.ids, f"run.id {run.id!r} was reused")
        self.ids.add(run.id)
        return run

    async def close(self, run: SubagentRun, what: str) -> None:
        try:
            async with asyncio.timeout(self.timeout):
                await run.aclose()
                await run.aclose()
        except TimeoutError:
            raise _Violation(f"aclose() did not return within {self.timeout:g}s {what}") from None
        except asyncio.CancelledError:
            raise
        except Exception as error:
            raise _Violation(f"aclose() raised {type(error).__name__} {what}") from error

    # the checks

    async def shape(self) -> None:
        provider = self.provider
        _check(isinstance(provider, SubagentProvider), "the provider is not a SubagentProvider")
        _check(isinstance(provider.name, str) and bool(provider.name), "name must be non-empty")
        _check(isinstance(provider.capabilities, Capabilities), "capabilities must be Capabilities")
        _check(
            isinstance(provider.inherits_parent_context, bool),
            "inherits_parent_context must be a bool",
        )

    async def completes(self) -> None:
        run = await self.start(self.make_request)
        result = await _result(run, self.timeout, "for the completing request")
        _check(
            result.stop_reason == StopReason.COMPLETED,
            f"the completing request ended {result.stop_reason!s}, diagnostic: {result.diagnostic}",
        )
        _check(result.diagnostic is None, "a completed result must have no diagnostic")
        _check(result.text.strip() != "", "a completed result must carry a non-blank answer")
        again = await _result(run, self.settle_timeout, "on a second call")
        _check(again == result, "result() must return the same result every time")
        await self.close(run, "after completion")
        after = await _result(run, self.settle_timeout, "after aclose()")
        _check(after == result, "aclose() after completion must not change the result")

    async def reports_activity(self) -> None:
        began = time.monotonic()
        run = await self.start(self.make_request)
        published = last_activity(run)
        _check(
            published is not None,
            "run.last_activity must be the time.monotonic() of the last message read from the"
            " product (the activity stamp); without it the caller's stall_timeout_s cannot apply",
        )
        assert published is not None
        _check(published <= time.monotonic(), "last_activity must not be in the future")
        await _result(run, self.timeout, "for the activity check")
        answered = last_activity(run)
        _check(answered is not None, "last_activity disappeared once the run settled")
        assert answered is not None
        _check(answered >= published, "last_activity must never move back")
        _check(
            answered > published and answered > began,
            "last_activity did not move while the product answered: every message read from"
            " the product must move it",
        )
        await self.close(run, "after the activity check")

    async def context_manager(self) -> None:
        run = await self.start(self.make_request)
        async with run as entered:
            _check(entered is run, "__aenter__ must return the run itself")
            await _result(run, self.timeout, "inside async with")
        await self.close(run, "after async with")

    async def cancel_wins_at_once(self) -> None:
        run = await self.start(self.make_request)
        run.cancel("conformance")
        run.cancel("conformance")
        began = time.monotonic()
        result = await _result(run, self.settle_timeout, "right after cancel()")
        _check_aborted(result, "after cancel() right after start()")
        _check(time.monotonic() - began <= self.settle_timeout, "cancel() must settle at once")
        await asyncio.sleep(self.cancel_after)
        later = await _result(run, self.settle_timeout, "a while after cancel()")
        _check_aborted(later, "a while after cancel() (a later answer must not win)")
        await self.close(run, "after cancel()")
        _check_aborted(await _result(run, self.settle_timeout, "after aclose()"), "after aclose()")

    async def aclose_cancels_open_run(self) -> None:
        run = await self.start(self.make_request)
        await self.close(run, "on an open run")
        result = await _result(run, self.settle_timeout, "after aclose() of an open run")
        _check_aborted(result, "after aclose() of an open run")

    async def awaiter_cancel_keeps_run(self) -> None:
        run = await self.start(self.make_request)
        waiter = asyncio.ensure_future(run.result())
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        result = await _result(run, self.timeout, "after cancelling a task awaiting result()")
        _check(
            result.stop_reason == StopReason.COMPLETED,
            "cancelling a task awaiting result() must not cancel the run "
            f"(it ended {result.stop_reason!s})",
        )
        await self.close(run, "after the awaiter was cancelled")

    async def concurrent(self) -> None:
        first = await self.start(self.make_request)
        second = await self.start(self.make_request)
        results = await asyncio.gather(
            _result(first, self.timeout, "for concurrent run 1"),
            _result(second, self.timeout, "for concurrent run 2"),
        )
        for index, result in enumerate(results, 1):
            _check(
                result.stop_reason == StopReason.COMPLETED,
                f"concurrent run {index} ended {result.stop_reason!s}",
            )
        await self.close(first, "for concurrent run 1")
        await self.close(second, "for concurrent run 2")

    async def cancelled_start(self) -> None:
        task = asyncio.ensure_future(
            self.provider.start(_resolve(self.provider, self.make_request()))
        )
        await asyncio.sleep(0)
        task.cancel()
        try:
            async with asyncio.timeout(self.timeout):
                run = await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            return
        except TimeoutError:
            raise _Violation("a cancelled start() did not finish in time") from None
        except Exception as error:
            raise _Violation(
                f"a cancelled start() raised {type(error).__name__}, not CancelledError"
            ) from error
        # start() finished before the cancel arrived: the run was published; close it.
        self.runs.append(run)
        await self.close(run, "after a start() that beat its cancel")

    async def fails_safely(self) -> None:
        assert self.make_failing_request is not None
        run = await self.start(self.make_failing_request)
        result = await _result(run, self.timeout, "for the failing request")
        _check(result.stop_reason != StopReason.COMPLETED, "the failing request must not complete")
        _check(isinstance(result.stop_reason, StopReason), "stop_reason must be a StopReason")
        if result.stop_reason != StopReason.ABORTED:
            _check(bool(result.diagnostic), "a failed result must carry a diagnostic")
        await self.close(run, "after a failure")

    async def cancel_mid_run(self) -> None:
        assert self.make_long_request is not None
        run = await self.start(self.make_long_request)
        waiter = asyncio.ensure_future(run.result())
        await asyncio.sleep(self.cancel_after)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        await asyncio.sleep(0.05)
        try:
            async with asyncio.timeout(0.05):
                early = await asyncio.shield(run.result())
        except TimeoutError:
            early = None
        _check(early is None, f"the long request settled on its own ({early}) before cancel()")
        run.cancel("conformance")
        result = await _result(run, self.settle_timeout, "after cancel() mid-run")
        _check_aborted(result, "after cancel() mid-run")
        await self.close(run, "after cancel() mid-run")

    async def run(self) -> ConformanceReport:
        checks: list[Callable[[], Awaitable[None]]] = [
            self.shape,
            self.completes,
            self.reports_activity,
            self.context_manager,
            self.cancel_wins_at_once,
            self.aclose_cancels_open_run,
            self.awaiter_cancel_keeps_run,
            self.concurrent,
            self.cancelled_start,
        ]
        if self.make_failing_request is not None:
            checks.append(self.fails_safely)
        if self.make_long_request is not None:
            checks.append(self.cancel_mid_run)
        report = ConformanceReport()
        failures: list[str] = []
        for check in checks:
            name = check.__name__
            try:
                try:
                    async with asyncio.timeout(self.timeout * 3):
                        await check()
                finally:
                    await self._cleanup()
                if self.after_each is not None:
                    outcome = self.after_each()
                    if outcome is not None:
                        await outcome
            except TimeoutError:
                failures.append(f"{name}: did not finish within {self.timeout * 3:g}s")
            except AssertionError as error:
                failures.append(f"{name}: {error}")
            else:
                report.passed.append(name)
        if failures:
            raise AssertionError(
                f"provider {self.provider.name!r} violates the subagent contract:\n  "
                + "\n  ".join(failures)
            )
        return report

    async def _cleanup(self) -> None:
        runs, self.runs = self.runs, []
        for run in runs:
            try:
                async with asyncio.timeout(self.timeout):
                    await run.aclose()
            except asyncio.CancelledError:
                raise
            except Exception:
                continue


async def run_provider_conformance(
    make_provider: Callable[[], SubagentProvider],
    *,
    make_request: RequestFactory,
    make_failing_request: RequestFactory | None = None,
    make_long_request: RequestFactory | None = None,
    after_each: Hook | None = None,
    step_timeout: float = 60.0,
    settle_timeout: float = 1.0,
    cancel_after: float = 0.2,
) -> ConformanceReport:
    """Check ``make_provider()`` against the seam's contract.

    Raises ``AssertionError`` listing every violated check.

    - ``make_request()`` returns a request that completes with a non-blank answer. It is called
      right before every start (queue the model's answer in it), about ten times in all.
    - ``make_failing_request()`` (optional) returns a request whose run fails.
    - ``make_long_request()`` (optional) returns a request that runs until cancelled (a stalled
      model), used to cancel mid-run.
    - ``after_each()`` (optional, sync or async) runs after each check; raise ``AssertionError``
      in it to flag leaks (for example live marked processes).
    - ``step_timeout`` bounds each start/result/close; ``settle_timeout`` is how soon ``cancel()``
      must settle ``aborted``; ``cancel_after`` is how long a run is left going before a cancel.

    Checks: provider shape; a run completes with no diagnostic and a stable result; the run
    reports product activity (``last_activity``, a ``time.monotonic()`` stamp that the messages
    carrying the answer moved, never backwards); idempotent
    ``aclose`` that keeps a completed result; ``async with``; cancel right after start wins, at once
    and for good, with no diagnostic and empty output; ``aclose`` of an open run aborts it;
    cancelling a task awaiting ``result()`` leaves the run going; two concurrent runs; a cancelled
    ``start()`` raises ``CancelledError``; failures settle (never raise) with a bounded diagnostic.
    """
    suite = _Suite(
        make_provider,
        make_request,
        make_failing_request,
        make_long_request,
        after_each,
        step_timeout,
        settle_timeout,
        cancel_after,
    )
    return await suite.run()
