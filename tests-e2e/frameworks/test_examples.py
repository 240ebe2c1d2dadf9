"""The examples in docs/frameworks.md run as written: each python block, extracted and executed.

Each example is a program that takes a profile path. It gets the ``products`` fixture's profile
(both real products against loopback model servers in this test process), runs in a directory
with a README.md, and must print its stand-in model's report of the subagent's answer. Its
product trees must be gone when it exits.
"""

from __future__ import annotations

import asyncio
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


def example(section: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    body = text[text.index(f"\n## {section}\n") :]
    following = body.find("\n## ", 1)
    body = body if following < 0 else body[:following]
    match = re.search(r"```python\n(.*?)```", body, re.DOTALL)
    assert match is not None, f"docs/frameworks.md: no python block under {section}"
    return match.group(1)


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
    script = tmp_path / "example.py"
    script.write_text(source, encoding="utf-8")
    profile = products.write_profile(tmp_path / "profile.toml")
    (products.workspace / "README.md").write_text("# hello\n", encoding="utf-8")
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
    assert (outcome.exit_code, out) == (0, f"The subagent says: {answer}\n"), err
    assert left == []
    assert [r.task for r in server.requests if r.task] == ["Summarise README.md in one line."]
