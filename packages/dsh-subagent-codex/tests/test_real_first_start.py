"""Concurrent first starts on one fresh ``CODEX_HOME``: all complete, in one process and across two.

Without the first-start lock, 16 at once on a fresh home failed 27 of 32 times at ``initialize``
(Codex exits 1 when another first start is creating its state databases).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from dsh.subagent import StopReason
from dsh.subagent_codex import CodexProvider, CodexProviderConfig
from dsh.subagent_codex.testing import (
    FakeResponsesServer,
    MessageItem,
    Reply,
    hermetic_env,
    make_start_request,
    write_codex_home,
)
from dsh.subprocess import Collect, SpawnSpec, default_runtime

pytestmark = pytest.mark.real_product

MODEL = "mock-model"


async def _one(provider: CodexProvider, workspace: Path, index: int) -> str:
    async with await provider.start(make_start_request(workspace, f"task {index}")) as run:
        result = await run.result()
    return result.diagnostic or "" if result.stop_reason != StopReason.COMPLETED else "completed"


async def test_sixteen_first_starts_at_once_on_a_fresh_home(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with FakeResponsesServer(default=Reply((MessageItem("done"),))) as server:
        for round_ in range(5):
            home = write_codex_home(tmp_path / f"home-{round_}", server.base_url, MODEL)
            provider = CodexProvider(CodexProviderConfig(env=hermetic_env(home)))
            outcomes = await asyncio.gather(*(_one(provider, workspace, i) for i in range(16)))
            assert outcomes == ["completed"] * 16, f"round {round_}: {outcomes}"
        assert len(server.requests) == 80


_CHILD = """
import asyncio, sys
from pathlib import Path
from dsh.subagent import StopReason
from dsh.subagent_codex import CodexProvider, CodexProviderConfig
from dsh.subagent_codex.testing import hermetic_env, make_start_request

async def one(provider, index):
    async with await provider.start(make_start_request(sys.argv[2], f"task {index}")) as run:
        result = await run.result()
    return result.stop_reason == StopReason.COMPLETED

async def main():
    provider = CodexProvider(CodexProviderConfig(env=hermetic_env(Path(sys.argv[1]))))
    done = await asyncio.gather(*(one(provider, i) for i in range(8)), return_exceptions=True)
    print("completed", sum(1 for d in done if d is True))

asyncio.run(main())
"""


async def test_two_processes_of_eight_on_one_fresh_home(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    async with FakeResponsesServer(default=Reply((MessageItem("done"),))) as server:
        home = write_codex_home(tmp_path / "home", server.base_url, MODEL)
        specs = [
            SpawnSpec(
                argv=[sys.executable, str(script), str(home), str(workspace)],
                stdout=Collect(4096),
                stderr=Collect(8192),
                grace_ms=2000,
            )
            for _ in range(2)
        ]
        children = [await default_runtime().spawn(spec) for spec in specs]
        try:
            async with asyncio.timeout(120):
                for child in children:
                    await child.wait()
            printed = [child.collected("stdout").text.strip() for child in children]
            errors = [child.collected("stderr").text[-2000:] for child in children]
        finally:
            for child in children:
                await child.aclose()
    assert printed == ["completed 8", "completed 8"], errors
    assert len(server.requests) == 16
