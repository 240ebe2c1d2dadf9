"""Each product's own prompt limit, enforced before a spawn (issue 40, item 5), on the REAL Codex.

Codex's app-server refuses a ``turn/start`` whose text inputs sum to more than
``MAX_USER_INPUT_TEXT_CHARS`` (``1 << 20``) characters with JSON-RPC ``-32602``, which reached
the caller as ``stage: turn-start; category: unknown`` after a whole process start. dsh now
refuses it first, naming the field and both sizes. Claude Code states no prompt limit of its own
(a 10 MB prompt ended as ``category: connection``), so its provider declares none.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.subagent.testing import FakeProvider
from dsh.subagent_claude_code import ClaudeCodeProvider
from dsh.subagent_codex import CodexProvider
from dsh.subagent_codex.testing import FakeResponsesServer, hermetic_env, write_codex_home
from dsh.tool_subagent import Caller, Harness

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(120)]

LIMIT = 1_048_576
REFUSED = (
    'subagent provider "codex": the "prompt" field is 1,048,577 characters;'
    " Codex accepts at most 1,048,576"
)


def test_each_provider_declares_its_measured_limit() -> None:
    assert CodexProvider.max_prompt_chars == LIMIT
    assert ClaudeCodeProvider.max_prompt_chars is None
    assert not hasattr(FakeProvider, "max_prompt_chars")  # a provider without the hook


async def test_a_prompt_at_codexs_limit_completes_and_one_over_is_refused_before_a_spawn(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    async with FakeResponsesServer() as codex:
        home = write_codex_home(tmp_path / "codex-home", codex.base_url, "limit-model")
        config = {"env": hermetic_env(home), "stderr": "discard", "dispose_grace_ms": 2000}
        profile = {"provider": [{"kind": "codex", "config": config}]}
        caller = Caller("limit-session", str(workspace))
        async with Harness.from_profile(profile) as harness:
            tool = harness.tool("subagent_codex")
            # One character (a non-ASCII one: Codex counts characters, not bytes) too many.
            over = "é" * (LIMIT + 1)
            for background in (False, True):
                arguments = {"description": "d", "prompt": over, "run_in_background": background}
                refused = await tool.call(arguments, caller)
                assert (refused.text, refused.is_error) == (REFUSED, True)
            assert codex.requests == []
            assert harness.describe()["starts"] == 0  # nothing was started or queued
            codex.queue_text("took it all", phase="final_answer")
            at_limit = await tool.call({"description": "d", "prompt": "é" * LIMIT}, caller)
            assert (at_limit.text, at_limit.is_error) == ("took it all", False)
            (request,) = codex.requests
            assert request.task == "é" * LIMIT
