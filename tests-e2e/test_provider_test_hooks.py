"""Both product providers' ``testing`` modules offer the same test hooks (issue 15)."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from types import ModuleType

import pytest

import dsh.subagent_claude_code.testing as claude_testing
import dsh.subagent_codex.testing as codex_testing
from dsh.subagent import TextBlock
from dsh.subagent_claude_code import ClaudeCodeProvider, ClaudeCodeProviderConfig
from dsh.subagent_codex import CodexProvider, CodexProviderConfig

SHARED = {
    "Behaviour",
    "RecordedRequest",
    "hermetic_env",
    "make_start_request",
    "provider_with_program",
}


@pytest.mark.parametrize("module", [codex_testing, claude_testing])
def test_the_shared_hooks_are_exported(module: ModuleType) -> None:
    assert set(module.__all__) >= SHARED


@pytest.mark.parametrize(
    ("module", "provider"), [(codex_testing, "codex"), (claude_testing, "claude-code")]
)
def test_make_start_request_is_the_same_in_both(
    module: ModuleType, provider: str, tmp_path: Path
) -> None:
    request = module.make_start_request(tmp_path, "a ", "b")
    assert request.prompt == (TextBlock("a "), TextBlock("b"))
    assert request.parent.cwd == str(tmp_path)
    assert request.descriptor.provider == provider
    assert module.make_start_request(None, "x").parent.cwd is None


def test_provider_with_program_takes_config_then_program() -> None:
    program = [sys.executable, "stand_in.py"]
    codex = codex_testing.provider_with_program(CodexProviderConfig(), program)
    claude = claude_testing.provider_with_program(ClaudeCodeProviderConfig(), program)
    assert isinstance(codex, CodexProvider)
    assert isinstance(claude, ClaudeCodeProvider)
    for hook in (codex_testing.provider_with_program, claude_testing.provider_with_program):
        assert list(inspect.signature(hook).parameters)[:2] == ["config", "program"]
