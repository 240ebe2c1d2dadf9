"""The examples in docs/frameworks.md run as written: each python block, extracted and executed.

Each example is a program that takes a profile path; the typed-answer programs get the
section's own ``[[tool]]`` row appended to it. It gets the ``products`` fixture's profile
(both real products against loopback model servers in this test process), runs in a directory
with a README.md, and must print its stand-in model's report of the subagent's answer. Its
product trees must be gone when it exits.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh.subprocess import Collect, SpawnSpec, default_runtime, marked_processes

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(180)]

DOC = Path(__file__).resolve().parents[2] / "docs" / "frameworks.md"
EXAMPLES = {
    "pydantic-ai": ("subagent_codex", "codex"),
    "OpenAI Agents SDK": ("subagent_claude_code", "claude"),
    "LangChain and LangGraph": ("subagent_codex", "codex"),
}


#: The typed-answer programs in their order, the product each one's tool delegates to.
TYPED = {"pydantic-ai": "codex", "OpenAI Agents SDK": "claude-code", "LangChain": "codex"}
TYPED_VALUE = {"failing": ["test_a", "test_b ✓"]}
TYPED_JSON = '{"failing":["test_a","test_b ✓"]}'


def blocks(section: str, language: str = "python") -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    body = text[text.index(f"\n## {section}\n") :]
    following = body.find("\n## ", 1)
    body = body if following < 0 else body[:following]
    found = re.findall(rf"```{language}\n(.*?)```", body, re.DOTALL)
    assert found, f"docs/frameworks.md: no {language} block under {section}"
    return found


def example(section: str) -> str:
    return blocks(section)[0]


async def run_example(products: Any, tmp_path: Path, source: str, profile: Path) -> str:
    """Run ``source`` with ``profile`` in the workspace; its stdout (exit 0, no tree left)."""
    script = tmp_path / "example.py"
    script.write_text(source, encoding="utf-8")
    spec = SpawnSpec(
        argv=[sys.executable, str(script), str(profile)],
        cwd=str(products.workspace),
        env={"HOME": str(tmp_path)},
        stdout=Collect(1 << 16),
        stderr=Collect(1 << 16),
    )
    async with await default_runtime().spawn(spec) as proc:
        async with asyncio.timeout(120):
            outcome = await proc.wait()
        out, err = proc.collected("stdout").text, proc.collected("stderr").text
        left = marked_processes(owner_pid=proc.pid)
    assert outcome.exit_code == 0, err
    assert left == []
    return out


def test_each_section_has_a_complete_program() -> None:
    for section in EXAMPLES:
        source = example(section)
        compile(source, f"frameworks.md ({section})", "exec")
        assert "asyncio.run(main())" in source


@pytest.mark.parametrize("section", EXAMPLES)
async def test_the_example_runs_as_written(products: Any, tmp_path: Path, section: str) -> None:
    tool, product = EXAMPLES[section]
    answer = f"README.md says hello ({section})"
    server = products.codex if product == "codex" else products.claude
    server.queue_text(answer, match="Summarise README.md")
    source = example(section)
    assert f'"{tool}"' in source  # the product the example delegates to answers it
    profile = products.write_profile(tmp_path / "profile.toml")
    (products.workspace / "README.md").write_text("# hello\n", encoding="utf-8")
    out = await run_example(products, tmp_path, source, profile)
    assert out == f"The subagent says: {answer}\n"
    assert [r.task for r in server.requests if r.task] == ["Summarise README.md in one line."]


def test_the_typed_answers_section_has_a_program_per_framework() -> None:
    programs = blocks("Typed answers")
    assert len(programs) == len(TYPED)
    for (framework, _), source in zip(TYPED.items(), programs, strict=True):
        compile(source, f"frameworks.md (typed, {framework})", "exec")
        assert '"failing_tests"' in source


@pytest.mark.parametrize("index", range(len(TYPED)), ids=list(TYPED))
async def test_each_typed_answer_program_prints_the_checked_value(
    products: Any, tmp_path: Path, index: int
) -> None:
    product = list(TYPED.values())[index]
    (row,) = blocks("Typed answers", "toml")
    row = row.replace('provider = "codex"', f"provider = {json.dumps(product)}")
    profile = products.write_profile(tmp_path / "profile.toml")
    profile.write_text(profile.read_text(encoding="utf-8") + row, encoding="utf-8")
    if product == "codex":
        products.codex.queue_text(json.dumps(TYPED_VALUE), phase="final_answer")
    else:
        products.claude.queue_tool_call("StructuredOutput", TYPED_VALUE)
    out = await run_example(products, tmp_path, blocks("Typed answers")[index], profile)
    # The host read the value itself; the model read its compact JSON.
    assert out == f"{TYPED_VALUE['failing']}\nThe subagent says: {TYPED_JSON}\n"
    # The product sent its model the profile's schema.
    if product == "codex":
        (request,) = products.codex.requests
        schema = request.body["text"]["format"]["schema"]
    else:
        (request,) = products.claude.requests  # the StructuredOutput call ends the turn
        (tool,) = [t for t in request.body["tools"] if t["name"] == "StructuredOutput"]
        schema = tool["input_schema"]
    assert schema["properties"] == {"failing": {"type": "array", "items": {"type": "string"}}}
