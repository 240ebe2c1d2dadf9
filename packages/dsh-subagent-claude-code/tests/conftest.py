"""Fixtures for the Claude Code provider tests: the loopback server, homes, leak guards."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent import Descriptor, Parent, ResolvedStartRequest, TextBlock
from dsh.subagent_claude_code import ClaudeCodeProvider, ClaudeCodeProviderConfig
from dsh.subagent_claude_code.testing import FakeMessagesServer, hermetic_env
from dsh.subprocess import marked_processes
from dsh.subprocess.pytest_plugin import dsh_leak_guard, dsh_session  # noqa: F401

MakeProvider = Callable[..., ClaudeCodeProvider]


@pytest.fixture
async def server() -> AsyncIterator[FakeMessagesServer]:
    async with FakeMessagesServer() as fake:
        yield fake


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


@pytest.fixture
def make_provider(tmp_path: Path, server: FakeMessagesServer) -> MakeProvider:
    def make(**fields: Any) -> ClaudeCodeProvider:
        env = hermetic_env(
            tmp_path / "homes" / fields.get("provider_name", "claude-code"), server.base_url
        )
        env.update(fields.pop("env", {}))
        return ClaudeCodeProvider(ClaudeCodeProviderConfig(env=env, **fields))

    return make


def _request(
    text: str, cwd: Path | str | None, provider: str = "claude-code"
) -> ResolvedStartRequest:
    return ResolvedStartRequest(
        prompt=[TextBlock(text)],
        parent=Parent("parent-session", None if cwd is None else str(cwd)),
        descriptor=Descriptor(provider=provider),
    )


MakeRequest = Callable[..., ResolvedStartRequest]


@pytest.fixture
def make_request() -> MakeRequest:
    return _request


def own_marked() -> list[int]:
    """Marked processes whose tree marker names this test process as owner.

    Other suites may run on the same machine at the same time, so ``marked_processes()`` alone
    would also list their trees.
    """
    return marked_processes(owner_pid=os.getpid())


@pytest.fixture
def own_marked_processes() -> Callable[[], list[int]]:
    return own_marked


async def _wait_until(predicate: Callable[[], bool], limit: float = 20.0) -> None:
    """Poll ``predicate`` off the loop (test-side only) until it holds."""
    async with asyncio.timeout(limit):
        while not await asyncio.to_thread(predicate):  # noqa: ASYNC110 - test-side polling
            await asyncio.sleep(0.05)


@pytest.fixture
def wait_until() -> Callable[..., Any]:
    return _wait_until
