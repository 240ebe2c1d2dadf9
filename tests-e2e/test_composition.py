"""Composition: the two documented profiles build with ``PATH=""`` and start nothing.

``Harness.from_profile`` is pinned through ``describe()`` for a profile with two named Codex
instances plus the default one (given as a mapping) and for one mixing both products (given as
a TOML file). No process may be started: no process carrying a dsh marker owned by this test
process appears, the test process gains no child and ``describe()`` reports ``starts: 0``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psutil
import pytest

from dsh.subprocess.testing import describe_processes, spawner_processes
from dsh.tool_subagent import Harness
from dsh.tool_subagent._demo.scenarios import owned_marked_processes

#: Both product providers honour an output schema (issue 40); Claude Code also stops a run
#: itself past a cost (issue 39).
CODEX_CAPABILITIES = {
    "output_schema": True,
    "depth_limit": False,
    "tool_filter": False,
    "persona": False,
    "cost_limit": False,
}
CLAUDE_CAPABILITIES = {**CODEX_CAPABILITIES, "cost_limit": True}
WITH_BACKGROUND = ["description", "prompt", "run_in_background"]
REQUIRED = ["description", "prompt"]
JOB_TOOLS = ["job_output", "job_list", "job_kill"]

THREE_CODEX: dict[str, Any] = {
    "provider": [
        {"kind": "codex"},
        {
            "kind": "codex",
            "config": {
                "provider_name": "codex-primary",
                "model": "gpt-5.1-codex",
                "inherit_env": ["OPENAI_API_KEY"],
            },
        },
        {
            "kind": "codex",
            "config": {
                "provider_name": "codex-review",
                "model": "gpt-5.1-codex-mini",
                "permission_mode": "approve-for-me",
            },
        },
    ],
    "tool": [
        {"provider": "codex", "tool_name": "subagent_codex", "max_depth": "provider-managed"},
        {
            "provider": "codex-primary",
            "tool_name": "subagent_codex_primary",
            "max_depth": "provider-managed",
        },
        {
            "provider": "codex-review",
            "tool_name": "review",
            "max_depth": "provider-managed",
            "enable_run_in_background": False,
        },
    ],
    "jobs": {"max_concurrent_jobs_per_owner": 4, "wait_timeout_ms": 20000},
}

THREE_CODEX_DESCRIBED = {
    "providers": [
        {
            "name": "codex",
            "kind": "codex",
            "capabilities": CODEX_CAPABILITIES,
            "inherits_parent_context": False,
        },
        {
            "name": "codex-primary",
            "kind": "codex",
            "capabilities": CODEX_CAPABILITIES,
            "inherits_parent_context": False,
        },
        {
            "name": "codex-review",
            "kind": "codex",
            "capabilities": CODEX_CAPABILITIES,
            "inherits_parent_context": False,
        },
    ],
    "tools": [
        {
            "name": "subagent_codex",
            "provider": "codex",
            "parameters": WITH_BACKGROUND,
            "required": REQUIRED,
        },
        {
            "name": "subagent_codex_primary",
            "provider": "codex-primary",
            "parameters": WITH_BACKGROUND,
            "required": REQUIRED,
        },
        {
            "name": "review",
            "provider": "codex-review",
            "parameters": ["description", "prompt"],
            "required": REQUIRED,
        },
    ],
    "job_tools": JOB_TOOLS,
    "starts": 0,
}

MIXED_TOML = """
[[provider]]
kind = "codex"
[provider.config]
provider_name = "codex-primary"
model = "gpt-5.1-codex"
inherit_env = ["OPENAI_API_KEY"]

[[provider]]
kind = "claude-code"

[[tool]]
provider = "codex-primary"
tool_name = "subagent_codex_primary"
max_depth = "provider-managed"

[[tool]]
provider = "claude-code"
tool_name = "subagent_claude_code"
max_depth = "provider-managed"

[jobs]
max_concurrent_jobs_per_owner = 10
wait_timeout_ms = 30000
max_wait_timeout_ms = 600000
"""

MIXED_DESCRIBED = {
    "providers": [
        {
            "name": "codex-primary",
            "kind": "codex",
            "capabilities": CODEX_CAPABILITIES,
            "inherits_parent_context": False,
        },
        {
            "name": "claude-code",
            "kind": "claude-code",
            "capabilities": CLAUDE_CAPABILITIES,
            "inherits_parent_context": False,
        },
    ],
    "tools": [
        {
            "name": "subagent_codex_primary",
            "provider": "codex-primary",
            "parameters": WITH_BACKGROUND,
            "required": REQUIRED,
        },
        {
            "name": "subagent_claude_code",
            "provider": "claude-code",
            "parameters": WITH_BACKGROUND,
            "required": REQUIRED,
        },
    ],
    "job_tools": JOB_TOOLS,
    "starts": 0,
}


def _is_machinery(proc: psutil.Process) -> bool:
    # A spawner left by earlier tests of this session refills its standby supervisors in the
    # background: those come and go by themselves. A supervisor is a fork of the spawner, so it
    # carries the spawner's argv; each process is judged by its own argv, read now, since a
    # supervisor forked after a separate list of the machinery was taken would not be on it.
    # The spawner itself (whose parent is this process) still counts, so a harness that started
    # one would show.
    try:
        return proc.ppid() != os.getpid() and proc.pid in spawner_processes(os.getpid())
    except psutil.NoSuchProcess:
        return True  # gone already: nothing started by the harness is left running


def _processes() -> set[int]:
    children = {p.pid for p in psutil.Process().children(recursive=True) if not _is_machinery(p)}
    return children | set(owned_marked_processes())


def _started_since(before: set[int]) -> list[str]:
    # Only new processes count: one left by an earlier test may end meanwhile. Each is described
    # (command line, parent), so a failure in CI says what started.
    return describe_processes(sorted(_processes() - before))


@pytest.fixture
def empty_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")


@pytest.mark.usefixtures("empty_path")
async def test_three_codex_instances_compose_without_starting_anything() -> None:
    before = _processes()
    async with Harness.from_profile(THREE_CODEX) as harness:
        described = harness.describe()
        assert _started_since(before) == []
        assert harness.jobs.config.max_concurrent_jobs_per_owner == 4
        names = [tool.name for tool in harness.tools]
    assert described == THREE_CODEX_DESCRIBED
    assert names == ["subagent_codex", "subagent_codex_primary", "review", *JOB_TOOLS]
    assert _started_since(before) == []


@pytest.mark.usefixtures("empty_path")
async def test_mixed_products_profile_file_composes_without_starting_anything(
    tmp_path: Path,
) -> None:
    profile = tmp_path / "profile.toml"
    profile.write_text(MIXED_TOML, encoding="utf-8")
    before = _processes()
    async with Harness.from_profile(profile) as harness:
        described = harness.describe()
        assert _started_since(before) == []
    assert described == MIXED_DESCRIBED
    assert _started_since(before) == []


@pytest.mark.usefixtures("empty_path")
async def test_default_profile_holds_both_products_without_starting_anything() -> None:
    before = _processes()
    async with Harness.from_profile(None) as harness:
        described = harness.describe()
    assert [(p["name"], p["kind"]) for p in described["providers"]] == [
        ("claude-code", "claude-code"),
        ("codex", "codex"),
    ]
    assert [t["name"] for t in described["tools"]] == ["subagent_claude_code", "subagent_codex"]
    assert described["starts"] == 0
    assert _started_since(before) == []
