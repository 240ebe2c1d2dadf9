"""Typed answers from the REAL products through the loopback models (issue 40).

Each product gets a tool with a fixed output schema. Codex answers with its final message's
JSON (the binary sends the schema to the model as a strict ``json_schema`` text format); Claude
Code answers through the ``StructuredOutput`` tool its CLI adds for ``--json-schema``. dsh checks
the value against the schema whatever the product claims; a run without a matching value is the
safe ``structured-output`` failure, never the answer's text.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client, types

from dsh.subagent.testing import TYPED_SCHEMA, TYPED_VALUE
from dsh.tool_subagent import Caller, ToolResult

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(180)]

CODEX, CLAUDE = "codex", "claude-code"
TOOLS = {CODEX: "typed_codex", CLAUDE: "typed_claude_code"}
PRODUCTS = {CODEX: "Codex", CLAUDE: "Claude Code"}
SCHEMA, VALUE = TYPED_SCHEMA, TYPED_VALUE
COMPACT = '{"failing":["test_a","test_b ✓"]}'
SECRET = "typed-secret-answer-8c1d"
DSH = Path(sys.executable).with_name("dsh")


async def _delegate(stack: Any, product: str, prompt: str) -> ToolResult:
    result: ToolResult = await stack.call(TOOLS[product], description="typed task", prompt=prompt)
    return result


def _answer(stack: Any, product: str, value: Any) -> None:
    if product == CODEX:
        stack.codex.queue_text(json.dumps(value), phase="final_answer")
    else:
        stack.claude.queue_tool_call("StructuredOutput", value)


def profile_data(loopback: Any) -> Any:
    # Both products may run a command without asking (the tool-first case runs one).
    return loopback.profile(
        **loopback.unattended(),
        tool=[
            {"provider": kind, "tool_name": name, "output_schema": SCHEMA}
            for kind, name in TOOLS.items()
        ],
    )


@pytest.fixture
async def stack(loopback: Any) -> AsyncIterator[Any]:
    caller = Caller("typed-session", str(loopback.workspace))
    async with loopback.session(profile_data(loopback), caller) as session:
        yield session


@pytest.mark.parametrize("product", [CODEX, CLAUDE])
async def test_a_matching_answer_is_the_value_and_its_compact_json(
    stack: Any, product: str
) -> None:
    _answer(stack, product, VALUE)
    result = await _delegate(stack, product, "List the failing tests.")
    assert (result.text, result.is_error) == (COMPACT, False)
    assert result.value == {
        "stop_reason": "completed",
        "diagnostic": None,
        "structured_output": VALUE,
    }
    # What each product sent its model: the schema itself.
    if product == CODEX:
        (request,) = stack.codex.requests
        assert request.body["text"]["format"] == {
            "type": "json_schema",
            "strict": True,
            "schema": SCHEMA,
            "name": "codex_output_schema",
        }
    else:
        (sent,) = stack.claude.requests  # the StructuredOutput call ends the turn
        (tool,) = [t for t in sent.body["tools"] if t["name"] == "StructuredOutput"]
        assert tool["input_schema"] == SCHEMA


@pytest.mark.parametrize("product", [CODEX, CLAUDE])
async def test_an_answer_that_does_not_match_is_the_safe_failure(stack: Any, product: str) -> None:
    bad = {"failing": [SECRET, 7]}
    if product == CODEX:
        _answer(stack, CODEX, bad)
        stage, suffix = "output", ""
    else:
        # The CLI checks each StructuredOutput call itself and asks again; after its retries
        # (5 calls) it ends with error_max_structured_output_retries and exits 1.
        for _ in range(5):
            _answer(stack, CLAUDE, bad)
        stage, suffix = "query-run", "; exit code: 1"
    result = await _delegate(stack, product, "List the failing tests.")
    line = (
        f"Product subagent failure (product: {PRODUCTS[product]}; stage: {stage};"
        f" category: structured-output{suffix})"
    )
    assert (result.text, result.is_error) == (f"subagent run failed\nDiagnostic: {line}", True)
    assert result.value == {"stop_reason": "error", "diagnostic": line}
    assert SECRET not in repr(result)
    if product == CLAUDE:
        assert len(stack.claude.requests) == 5


@pytest.mark.parametrize("product", [CODEX, CLAUDE])
async def test_a_tool_runs_first_then_the_value_comes_back(stack: Any, product: str) -> None:
    marker = stack.workspace / f"ran-{product}.txt"
    command = f"echo ran > {marker.name}"
    if product == CODEX:
        stack.codex.queue_tool_call(
            "exec_command", {"cmd": command, "login": False, "yield_time_ms": 20000}
        )
    else:
        stack.claude.queue_tool_call("Bash", {"command": command, "description": "mark"})
    _answer(stack, product, VALUE)
    result = await _delegate(stack, product, "Run the command, then list the failing tests.")
    assert (result.text, result.is_error) == (COMPACT, False)
    assert result.value is not None
    assert result.value["structured_output"] == VALUE
    assert marker.read_text() == "ran\n"
    # Under a schema the model is still offered the product's tools (two model requests).
    bodies = [r.body for r in (stack.codex.requests if product == CODEX else stack.claude.requests)]
    assert len(bodies) == 2
    assert bodies[0]["tools"]


async def test_dsh_mcp_declares_the_schema_and_returns_structured_content(
    loopback: Any,
) -> None:
    tmp_path, workspace = loopback.root, loopback.workspace
    codex, claude = loopback.codex, loopback.claude
    data = profile_data(loopback)
    for row in data["tool"]:
        row["enable_run_in_background"] = False  # a start would answer with a job id
    (tmp_path / "failing.json").write_text(json.dumps(SCHEMA))
    data["tool"][1]["output_schema"] = "failing.json"  # a file beside the profile
    profile = loopback.write(data)
    state = os.environ.get("XDG_STATE_HOME")
    params = StdioServerParameters(
        command=str(DSH),
        args=["mcp", "--profile", str(profile), "--cwd", str(workspace)],
        cwd=str(workspace),
        env={"XDG_STATE_HOME": state} if state else None,
    )
    codex.queue_text(json.dumps(VALUE), phase="final_answer")
    claude.queue_tool_call("StructuredOutput", VALUE)
    with (tmp_path / "dsh-mcp.stderr").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            with anyio.fail_after(60):
                await session.initialize()
            listed = {tool.name: tool for tool in (await session.list_tools()).tools}
            for product, name in TOOLS.items():
                assert listed[name].output_schema == SCHEMA
                # The client checks structuredContent against outputSchema itself.
                result = await session.call_tool(
                    name, {"description": "d", "prompt": "list"}, read_timeout_seconds=120
                )
                assert not result.is_error, product
                assert result.structured_content == VALUE
                (block,) = result.content
                assert isinstance(block, types.TextContent)
                assert block.text == COMPACT
