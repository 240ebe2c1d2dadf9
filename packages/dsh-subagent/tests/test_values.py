"""Value types, diagnostics, ProductFailure and ResultLatch."""

import asyncio
import types

import pytest

import dsh.subagent as seam
from dsh.subagent import (
    Descriptor,
    Parent,
    ProductFailure,
    ResolvedStartRequest,
    StopReason,
    SubagentError,
    SubagentResult,
    SubagentStartRequest,
    TextBlock,
)
from dsh.subagent.kit import (
    MAX_DIAGNOSTIC_BYTES,
    FailureFacts,
    ResultLatch,
    bound_diagnostic,
    failure_line,
)

MARKER = "\n[diagnostic truncated]"


def _isort_key(name: str) -> tuple[int, str]:
    if name.isupper():
        return (0, name)
    return (1 if name[:1].isupper() else 2, name)


def test_all_is_sorted_and_complete() -> None:
    assert seam.__all__ == sorted(seam.__all__, key=_isort_key)
    public = {
        name
        for name, value in vars(seam).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert set(seam.__all__) == public
    for name in seam.__all__:
        assert getattr(seam, name) is not None


def test_text_block_and_result_text() -> None:
    block = TextBlock("a")
    assert block.type == "text"
    result = SubagentResult(StopReason.COMPLETED, (TextBlock("a"), TextBlock("b")), "dropped")
    assert result.text == "ab"
    assert result.diagnostic is None
    failed = SubagentResult(StopReason.ERROR, (), "why")
    assert failed.diagnostic == "why"
    assert SubagentResult("max-tokens").stop_reason is StopReason.MAX_TOKENS  # type: ignore[arg-type]


def test_request_is_frozen_and_resolves() -> None:
    request = SubagentStartRequest([TextBlock("task")], Parent("s1", "/w"), label="L")
    assert request.prompt == (TextBlock("task"),)
    with pytest.raises(AttributeError):
        request.label = "x"  # type: ignore[misc]
    resolved = ResolvedStartRequest.from_request(request, Descriptor(provider="p", label="L"))
    assert isinstance(resolved, SubagentStartRequest)
    assert resolved.prompt == request.prompt
    assert resolved.descriptor == Descriptor(version=2, mode="one-shot", provider="p", label="L")
    with pytest.raises(TypeError):
        SubagentStartRequest("bare string", Parent("s", None))  # type: ignore[arg-type]


def test_failure_line_fields() -> None:
    assert failure_line(FailureFacts("Codex", "turn", "internalServerError")) == (
        "Product subagent failure (product: Codex; stage: turn; category: internalServerError)"
    )
    full = FailureFacts("Claude Code", "process", "process-exit", 503, 143, 15)
    assert full.signal == "SIGTERM"
    assert failure_line(full) == (
        "Product subagent failure (product: Claude Code; stage: process; category: process-exit;"
        " HTTP status: 503; exit code: 143; signal: SIGTERM)"
    )
    signal_only = FailureFacts("Codex", "process", "process-exit", signal="SIGKILL")
    assert failure_line(signal_only).endswith("category: process-exit; signal: SIGKILL)")


def test_bound_diagnostic_keeps_exact_limit() -> None:
    text = "x" * MAX_DIAGNOSTIC_BYTES
    assert bound_diagnostic(text) == text


def test_bound_diagnostic_cuts_multibyte_safely() -> None:
    for char in ("é", "€", "😀"):
        text = "ab" + char * 3000
        bounded = bound_diagnostic(text)
        data = bounded.encode("utf-8")
        assert len(data) <= MAX_DIAGNOSTIC_BYTES
        assert bounded.endswith(MARKER)
        assert "\ufffd" not in bounded
        body = bounded.removesuffix(MARKER)
        assert text.startswith(body)
        # The longest prefix that fits: one more character would not fit.
        nxt = text[: len(body) + 1].encode() + MARKER.encode()
        assert len(nxt) > MAX_DIAGNOSTIC_BYTES


def test_bound_diagnostic_one_byte_over() -> None:
    bounded = bound_diagnostic("y" * (MAX_DIAGNOSTIC_BYTES + 1))
    assert len(bounded.encode()) == MAX_DIAGNOSTIC_BYTES
    assert bounded.endswith(MARKER)


def test_product_failure_from_facts() -> None:
    facts = FailureFacts("Codex", "initialize", "unknown")
    error = ProductFailure.from_facts("subagent-codex:", facts)
    assert str(error) == (
        "subagent-codex: Product subagent failure (product: Codex; stage: initialize;"
        " category: unknown)"
    )
    assert error.facts is facts
    assert error.code == "PRODUCT_FAILURE"
    assert isinstance(error, SubagentError)
    same = ProductFailure.from_facts("subagent-codex", facts, fact_line="perm")
    assert str(same) == str(error) + "\nperm"


async def test_latch_first_settlement_wins() -> None:
    latch = ResultLatch()
    assert not latch.settled
    assert latch.result_if_settled is None
    done = SubagentResult(StopReason.COMPLETED, (TextBlock("a"),), "gone")
    assert latch.settle(done)
    assert not latch.abort()
    assert not latch.settle(SubagentResult(StopReason.ERROR, (), "late"))
    settled = await latch.wait()
    assert settled.stop_reason is StopReason.COMPLETED
    assert settled.diagnostic is None


async def test_latch_abort_wins_and_bounds() -> None:
    latch = ResultLatch()
    assert latch.abort()
    assert not latch.settle(SubagentResult(StopReason.COMPLETED, (TextBlock("ready"),)))
    assert latch.result_if_settled == SubagentResult(StopReason.ABORTED, (), None)
    other = ResultLatch()
    other.settle(SubagentResult(StopReason.ERROR, (), "z" * 10_000))
    result = other.result_if_settled
    assert result is not None
    assert result.diagnostic is not None
    assert len(result.diagnostic.encode()) <= MAX_DIAGNOSTIC_BYTES


async def test_latch_wait_cancellable() -> None:
    latch = ResultLatch()
    waiter = asyncio.ensure_future(latch.wait())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert not latch.settled
    second = asyncio.ensure_future(latch.wait())
    latch.settle(SubagentResult(StopReason.ERROR, (), "e"))
    assert (await second).stop_reason is StopReason.ERROR
