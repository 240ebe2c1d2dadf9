"""Shared fixture of the framework adapter suites: both real products behind a harness.

Test modules never import this file: they get a :class:`Products` from the ``products``
fixture, which starts the loopback model servers of both products in this process and builds a
harness from a profile mapping that points the real Codex and the real Claude Code at them. The
leak guard of ``tests-e2e/conftest.py`` applies on top.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from dsh.jobs import JobOwner
from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.subagent_codex.testing import (
    FakeResponsesServer,
    FunctionCallItem,
    HttpStatus,
    Reply,
    write_codex_home,
)
from dsh.subagent_codex.testing import hermetic_env as codex_env
from dsh.subprocess import marked_processes
from dsh.tool_subagent import Harness

CANARY = "canary-framework-5d2e81"
CODEX_FAILURE = (
    "subagent run failed\nDiagnostic: Product subagent failure (product: Codex; stage: turn;"
    " category: internalServerError)"
)
CLAUDE_FAILURE = (
    "subagent run failed\nDiagnostic: Product subagent failure (product: Claude Code;"
    " stage: query-run; category: authentication; HTTP status: 401; exit code: 1)"
)


@dataclass
class Products:
    """The harness, both loopback model servers and the subagents' working directory."""

    harness: Harness
    codex: FakeResponsesServer
    claude: FakeMessagesServer
    workspace: Path
    #: The profile the harness was built from (a mapping; :meth:`write_profile` writes TOML).
    profile: dict[str, Any]
    #: In each product's failure body; never in anything the agent's model is sent.
    canary: str = CANARY
    codex_failure: str = CODEX_FAILURE
    claude_failure: str = CLAUDE_FAILURE

    @staticmethod
    def trees() -> list[int]:
        """A /proc walk: live processes of the trees this test process spawned."""
        return marked_processes(owner_pid=os.getpid())

    def fail_both(self) -> None:
        """The next turn of each product fails with an error body that carries the canary."""
        self.codex.queue(HttpStatus(500, {"error": {"message": CANARY}}))
        self.claude.queue_http_error(401, CANARY)

    def hold_both_mid_turn(self) -> None:
        """The next turn of each stays busy: Codex runs ``sleep 30``, Claude's request stalls."""
        command = {"cmd": "sleep 30", "login": False, "yield_time_ms": 20000}
        self.codex.queue(Reply((FunctionCallItem("exec_command", command),)))
        self.claude.queue_stall()

    def write_profile(self, path: Path) -> Path:
        """The profile as a TOML file (for a program that builds its own harness)."""
        lines = []
        for provider in self.profile["provider"]:
            lines += ["[[provider]]", f"kind = {json.dumps(provider['kind'])}", "[provider.config]"]
            for key, value in provider["config"].items():
                if isinstance(value, dict):
                    pairs = ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items())
                    lines.append(f"{key} = {{ {pairs} }}")
                else:
                    lines.append(f"{key} = {json.dumps(value)}")
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    async def settled(self, owner: JobOwner, count: int) -> None:
        """Wait (bounded) until ``count`` of the owner's jobs are terminal, reading no output
        (a read would mark a job reported, and a reported job brings no notice)."""
        async with asyncio.timeout(90):
            while sum(s.terminal for s in self.harness.jobs.list(owner)) < count:  # noqa: ASYNC110 - bounded poll
                await asyncio.sleep(0.05)

    async def both_mid_turn(self) -> None:
        """Wait until Codex's ``sleep 30`` runs and Claude Code's request is stalled."""
        assert await self.claude.wait_for_requests(1, timeout=60)
        async with asyncio.timeout(60):
            while not await asyncio.to_thread(_has_sleep_descendant):  # noqa: ASYNC110 - bounded poll
                await asyncio.sleep(0.05)


def _has_sleep_descendant() -> bool:
    for pid in Products.trees():
        try:
            if psutil.Process(pid).cmdline()[:2] == ["sleep", "30"]:
                return True
        except psutil.Error:
            continue
    return False


@pytest.fixture
async def products(tmp_path: Path) -> AsyncIterator[Products]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    async with FakeResponsesServer() as codex, FakeMessagesServer() as claude:
        home = write_codex_home(tmp_path / "codex-home", codex.base_url, "mock-model")
        common = {"stderr": "discard", "dispose_grace_ms": 2000}
        profile: dict[str, Any] = {
            "provider": [
                {"kind": "codex", "config": {"env": codex_env(home), **common}},
                {
                    "kind": "claude-code",
                    "config": {"env": claude_env(tmp_path / "claude", claude.base_url), **common},
                },
            ]
        }
        async with Harness.from_profile(profile) as harness:
            yield Products(harness, codex, claude, workspace, profile)
