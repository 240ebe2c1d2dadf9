"""Each product's own prompt limit, enforced before a spawn (issue 40, item 5), on the REAL
products.

Codex's app-server refuses a ``turn/start`` whose text inputs sum to more than
``MAX_USER_INPUT_TEXT_CHARS`` (``1 << 20``) characters with JSON-RPC ``-32602``, which reached
the caller as ``stage: turn-start; category: unknown`` after a whole process start. Claude
Code's CLI ends a first request whose token estimate (UTF-16 code units of the whole request)
reaches its default model's window as "Prompt is too long" (``category: connection``) without a
model request; the bound is largest with the shortest cwd, ``/``. dsh now refuses both first,
naming the field and both sizes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dsh.subagent.testing import FakeProvider
from dsh.subagent_claude_code import ClaudeCodeProvider, ClaudeCodeProviderConfig
from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.subagent_codex import CodexProvider
from dsh.subagent_codex.testing import FakeResponsesServer, hermetic_env, write_codex_home
from dsh.tool_subagent import Caller, Harness, Tool

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(120)]

LIMIT = 1_048_576
REFUSED = (
    'subagent provider "codex": the "prompt" field is 1,048,577 characters;'
    " Codex accepts at most 1,048,576"
)

CLAUDE_LIMIT = 2_920_996
CLAUDE_REFUSED = (
    'subagent provider "claude-code": the "prompt" field is 2,920,997 UTF-16 code units;'
    " Claude Code accepts at most 2,920,996"
)


async def _assert_refused_before_a_start(
    harness: Harness, tool: Tool, caller: Caller, prompt: str, refusal: str
) -> None:
    """``prompt`` is refused with ``refusal`` in the foreground and in the background, and
    nothing was started or queued."""
    for background in (False, True):
        arguments = {"description": "d", "prompt": prompt, "run_in_background": background}
        refused = await tool.call(arguments, caller)
        assert (refused.text, refused.is_error) == (refusal, True)
    assert harness.describe()["starts"] == 0


def test_each_provider_declares_its_measured_limit() -> None:
    assert CodexProvider.max_prompt_chars == LIMIT
    assert ClaudeCodeProvider.max_prompt_chars == CLAUDE_LIMIT
    assert not hasattr(FakeProvider, "max_prompt_chars")  # a provider without the hook
    # Claude Code's bound is its default model's, seen only under private isolation: a model
    # chosen in the config, the env or the user's settings may take more, so no early refusal.
    private = ClaudeCodeProviderConfig(isolation="private")
    assert ClaudeCodeProvider(private).prompt_limit() == CLAUDE_LIMIT
    assert ClaudeCodeProvider(ClaudeCodeProviderConfig()).prompt_limit() is None
    chosen = ClaudeCodeProviderConfig(isolation="private", model="claude-other")
    assert ClaudeCodeProvider(chosen).prompt_limit() is None
    named = ClaudeCodeProviderConfig(isolation="private", env={"ANTHROPIC_MODEL": "x"})
    assert ClaudeCodeProvider(named).prompt_limit() is None
    assert ClaudeCodeProvider().prompt_size("a😀é") == 4  # UTF-16 code units


async def test_a_prompt_at_claude_codes_limit_completes_and_one_over_is_refused_before_a_spawn(
    tmp_path: Path,
) -> None:
    async with FakeMessagesServer() as claude:
        env = claude_env(tmp_path / "claude", claude.base_url)
        env = {k: v for k, v in env.items() if k not in ("HOME", "CLAUDE_CONFIG_DIR")}
        config = {"env": env, "isolation": "private", "stderr": "discard", "dispose_grace_ms": 2000}
        profile = {"provider": [{"kind": "claude-code", "config": config}]}
        caller = Caller("limit-session", "/")  # the shortest cwd: the bound is largest there
        async with Harness.from_profile(profile) as harness:
            tool = harness.tool("subagent_claude_code")
            # One UTF-16 code unit too many, in emoji (two units each: the CLI counts units).
            over = "😀" * (CLAUDE_LIMIT // 2) + "a"
            await _assert_refused_before_a_start(harness, tool, caller, over, CLAUDE_REFUSED)
            assert claude.requests == []
            claude.queue_text("took it all")
            at_limit = await tool.call({"description": "d", "prompt": "a" * CLAUDE_LIMIT}, caller)
            assert (at_limit.text, at_limit.is_error) == ("took it all", False)
            (request,) = [r for r in claude.requests if r.path.endswith("/messages")]
            assert request.task == "a" * CLAUDE_LIMIT


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
            await _assert_refused_before_a_start(harness, tool, caller, over, REFUSED)
            assert codex.requests == []
            codex.queue_text("took it all", phase="final_answer")
            at_limit = await tool.call({"description": "d", "prompt": "é" * LIMIT}, caller)
            assert (at_limit.text, at_limit.is_error) == ("took it all", False)
            (request,) = codex.requests
            assert request.task == "é" * LIMIT
