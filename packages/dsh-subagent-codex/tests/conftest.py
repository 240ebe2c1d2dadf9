"""Fixtures for the Codex provider tests (fresh CODEX_HOME and workspace per test)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from dsh.subagent import Descriptor, Parent, ResolvedStartRequest, TextBlock
from dsh.subagent_codex import CodexProvider, CodexProviderConfig
from dsh.subagent_codex.testing import FakeResponsesServer, hermetic_env, write_codex_home
from dsh.subprocess.pytest_plugin import dsh_leak_guard, dsh_session  # noqa: F401

MODEL = "mock-model"


@dataclass
class Env:
    server: FakeResponsesServer
    home: Path
    workspace: Path

    def provider(self, **fields: object) -> CodexProvider:
        env = dict(hermetic_env(self.home))
        extra = fields.pop("env", None)
        if isinstance(extra, dict):
            env.update(extra)
        return CodexProvider(
            CodexProviderConfig.model_validate({"env": env, "dispose_grace_ms": 2000, **fields})
        )

    def request(self, *texts: str, provider: str = "codex") -> ResolvedStartRequest:
        return make_request(self.workspace, *texts, provider=provider)


def make_request(
    cwd: Path | str | None, *texts: str, provider: str = "codex"
) -> ResolvedStartRequest:
    return ResolvedStartRequest(
        prompt=tuple(TextBlock(t) for t in texts),
        parent=Parent(session_id="s", cwd=None if cwd is None else str(cwd)),
        descriptor=Descriptor(provider=provider),
    )


@pytest.fixture
async def fake() -> AsyncIterator[FakeResponsesServer]:
    async with FakeResponsesServer() as server:
        yield server


@pytest.fixture
def codex_env(fake: FakeResponsesServer, tmp_path: Path) -> Env:
    home = write_codex_home(tmp_path / "home", fake.base_url, MODEL)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return Env(fake, home, workspace)


@pytest.fixture
def info_records(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger="dsh")
    return caplog
