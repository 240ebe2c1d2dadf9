"""Output schemas at the seam: checked before a start, and every answer checked against them."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dsh.subagent import (
    MAX_OUTPUT_SCHEMA_BYTES,
    STRUCTURED_OUTPUT_CATEGORY,
    Capabilities,
    Parent,
    StopReason,
    SubagentError,
    SubagentResult,
    SubagentService,
    SubagentStartRequest,
    TextBlock,
    check_output_schema,
)
from dsh.subagent.testing import FakeProvider

SCHEMA = {
    "type": "object",
    "properties": {"failing": {"type": "array", "items": {"type": "string"}}},
    "required": ["failing"],
}
LINE = "Product subagent failure (product: fake; stage: output; category: structured-output)"


def request(schema: Any = SCHEMA) -> SubagentStartRequest:
    return SubagentStartRequest(
        prompt=(TextBlock("list the failing tests"),),
        parent=Parent(session_id="s1", cwd="/tmp"),
        output_schema=schema,
    )


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ([], "must be a JSON Schema object, not list"),
        ({"type": "nope"}, "is not a valid JSON Schema (at /type: "),
        ({"properties": {"n": {"minimum": "x"}}}, "(at /properties/n/minimum: 'x' is not of type"),
        ({"const": object()}, "must hold JSON values only"),
        (
            {"description": "x" * MAX_OUTPUT_SCHEMA_BYTES},
            f"bytes as JSON; the limit is {MAX_OUTPUT_SCHEMA_BYTES}",
        ),
    ],
)
def test_a_bad_schema_is_refused_before_a_start_naming_the_field(schema: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        check_output_schema(schema)
    service = SubagentService()
    provider = FakeProvider(capabilities=Capabilities(output_schema=True))
    service.register(provider)
    with pytest.raises(SubagentError) as refused:
        service.check("fake", request(schema))
    assert str(refused.value).startswith('the "output_schema" field ')
    assert refused.value.code == "INVALID_REQUEST"


def test_a_schema_at_the_size_limit_is_accepted() -> None:
    check_output_schema(SCHEMA)
    padding = MAX_OUTPUT_SCHEMA_BYTES - len('{"description":""}')
    check_output_schema({"description": "x" * padding})


async def answered(text: str, stop: StopReason = StopReason.COMPLETED) -> SubagentResult:
    provider = FakeProvider(
        result=SubagentResult(stop, (TextBlock(text),), None if stop == "completed" else "d"),
        capabilities=Capabilities(output_schema=True),
    )
    async with SubagentService() as service:
        service.register(provider)
        async with await service.start("fake", request()) as run:
            result = await run.result()
    assert provider.requests[0].output_schema == SCHEMA  # the provider receives it
    return result


async def test_a_matching_answer_carries_its_value_and_compact_json() -> None:
    result = await answered('\n{ "failing": ["a", "b ✓"] }\n')
    assert result == SubagentResult(
        StopReason.COMPLETED,
        (TextBlock('{"failing":["a","b ✓"]}'),),
        structured_output={"failing": ["a", "b ✓"]},
    )


@pytest.mark.parametrize(
    "text",
    [
        '{"failing": [1]}',  # JSON, not matching
        "SECRET the tests are a and b",  # not JSON
        '```json\n{"failing": []}\n```',  # fenced: not JSON
        '{"failing": [NaN]}',  # not strict JSON
    ],
)
async def test_an_answer_without_a_matching_value_is_the_safe_failure(text: str) -> None:
    result = await answered(text)
    assert result == SubagentResult(StopReason.ERROR, (), LINE)
    assert STRUCTURED_OUTPUT_CATEGORY in LINE


async def test_a_run_that_did_not_complete_is_left_as_it_is() -> None:
    result = await answered("partial", StopReason.MAX_TOKENS)
    assert result == SubagentResult(StopReason.MAX_TOKENS, (TextBlock("partial"),), "d")


async def test_without_a_schema_the_answer_is_untouched() -> None:
    async with SubagentService() as service:
        service.register(
            FakeProvider(result=SubagentResult(StopReason.COMPLETED, (TextBlock(" 1 "),)))
        )
        async with await service.start("fake", request(None)) as run:
            result = await run.result()
    assert result.text == " 1 "
    assert result.structured_output is None
