"""Shared fixtures for the reliability suites.

Test modules never import this file: everything they share comes through fixtures (``kit``,
``codex`` and ``claude``). The leak guard of ``tests-e2e/conftest.py`` applies on top.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import gc
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from dsh.subagent import Descriptor, Parent, ResolvedStartRequest, TextBlock
from dsh.subagent_claude_code import ClaudeCodeProvider, ClaudeCodeProviderConfig
from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.subagent_codex import CodexProvider, CodexProviderConfig
from dsh.subagent_codex.testing import FakeResponsesServer, hermetic_env, write_codex_home
from dsh.subprocess import (
    Collect,
    ManagedProcess,
    SpawnSpec,
    default_runtime,
    marked_processes,
)
from dsh.subprocess import _spawn as spawn_module

HERE = Path(__file__).resolve().parent
CODEX_MODEL = "mock-model"
_LINE = (
    r"Product subagent failure \(product: (?:Codex|Claude Code); stage: [a-z-]+; "
    r"category: [A-Za-z-]+(?:; limit: [a-z]+)?(?:; HTTP status: \d+)?(?:; exit code: -?\d+)?"
    r"(?:; signal: SIG[A-Z0-9]+)?\)"
)
_FACT = (
    r"(?:Codex|Claude Code) unattended decision \(mode: [A-Za-z-]+; request: [a-zA-Z ]+; "
    r"decision: [a-z ]+\): [A-Za-z ]+"
)
_NOTES = ("Codex completed without a final answer",)
#: Imports first, reaps when a line arrives on stdin (``Kit.fresh_reaper``).
_REAPER = (
    "import sys; from dsh.subprocess import reap_orphans; sys.stdin.readline(); "
    "print(reap_orphans())"
)


class ReapedElsewhere(Exception):
    """A killed host's orphans vanished before this test's own reaper reached them.

    Every dsh process reaps the trees of dead owners when it starts, so another dsh program on
    the machine (a user's ``dsh demo``, another suite) may win the race. Nothing outlived the
    host then, but the attempt proved nothing about the reaper under test: it is tried again.
    """


class Kit:
    """Helpers for the reliability tests (requests, providers, process-table probes)."""

    here = HERE
    ReapedElsewhere = ReapedElsewhere
    escapee = HERE / "escapee.py"
    line_re = re.compile(_LINE)

    @staticmethod
    def request(cwd: Path | str, text: str, provider: str) -> ResolvedStartRequest:
        return ResolvedStartRequest(
            prompt=(TextBlock(text),),
            parent=Parent(session_id="reliability", cwd=str(cwd)),
            descriptor=Descriptor(provider=provider),
        )

    @staticmethod
    def is_safe_diagnostic(diagnostic: str | None) -> bool:
        """A failure line, optionally followed by the fixed note and/or one unattended fact."""
        if not diagnostic:
            return False
        first, *rest = diagnostic.split("\n")
        if not re.fullmatch(_LINE, first) or len(rest) > 2:
            return False
        return all(line in _NOTES or re.fullmatch(_FACT, line) for line in rest)

    @staticmethod
    def is_safe_failure_message(message: str) -> bool:
        """``<prefix>: <failure line>`` (or several joined by ``; `` for a failed rollback)."""
        prefix = r"subagent-(?:codex|claude-code): "
        part = prefix + _LINE
        return re.fullmatch(f"{part}(?:; {part})*", message) is not None

    @staticmethod
    def own_marked() -> list[int]:
        """Marked processes whose tree marker names this test process as the owner.

        Other jobs on the machine may run dsh trees of their own; only ours are asserted on.
        """
        return marked_processes(owner_pid=os.getpid())

    @staticmethod
    def owned_by(owner_pid: int) -> list[int]:
        """Marked processes whose tree marker names ``owner_pid`` as the owner."""
        return sorted(marked_processes(owner_pid=owner_pid))

    @staticmethod
    def pids_with(nonce: str) -> list[int]:
        """Live, non-zombie processes whose command line carries ``nonce`` (blocking scan)."""
        found = []
        own = os.getpid()
        for proc in psutil.process_iter(["pid", "cmdline", "status"]):
            info = proc.info
            if info["pid"] == own or info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(nonce in part for part in info["cmdline"] or ()):
                found.append(info["pid"])
        return sorted(found)

    @staticmethod
    async def wait_until(
        predicate: Callable[[], bool], limit: float = 30.0, what: str = "a condition"
    ) -> None:
        """Poll a blocking ``predicate`` off the loop until it holds (bounded)."""
        deadline = time.monotonic() + limit
        while not await asyncio.to_thread(predicate):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.05)

    @staticmethod
    async def spawn_host(spec: SpawnSpec, *, supervised: bool) -> ManagedProcess:
        """Spawn a crash test's host program; without a supervisor of this process above it when
        the host runs ``plain``.

        A host spawned under this process's own supervisor leaves its orphans to that
        supervisor's spawner, a subreaper that kills adopted trees (containment): a plain host's
        orphans would then die without the reaper, at the spawner's next idle check (the cause
        of this test's intermittent "survivors are gone" failures). Spawned plain, the killed
        host's orphans go to init, as a crashed host's do, and only the reaper removes them.
        """
        was = spawn_module._SUPERVISED
        spawn_module._SUPERVISED = was and supervised
        try:
            return await default_runtime().spawn(spec)
        finally:
            spawn_module._SUPERVISED = was

    @staticmethod
    @contextlib.asynccontextmanager
    async def fresh_reaper() -> AsyncIterator[Callable[[], Awaitable[set[int]]]]:
        """A new Python process, as after a host crash, that runs ``reap_orphans()`` when told.

        It starts (and imports dsh) before the crash, so that the reap comes right after the
        test's own checks and other dsh processes on the machine have less time to be first.
        Calling what it yields reaps once and gives the pids reaped; the reaper must exit 0.
        """
        reaper = await default_runtime().spawn(
            SpawnSpec(
                argv=[sys.executable, "-c", _REAPER],
                stdin="pipe",
                stdout=Collect(65_536),
                stderr=Collect(16_384),
                grace_ms=1000,
            )
        )

        async def reap() -> set[int]:
            assert reaper.stdin is not None
            reaper.stdin.write(b"go\n")
            await reaper.stdin.drain()
            outcome = await reaper.wait()
            assert outcome.exit_code == 0, reaper.collected("stderr").text
            return set(ast.literal_eval(reaper.collected("stdout").text))  # a printed list

        async with reaper:
            yield reap

    @staticmethod
    async def reap_in_fresh_process() -> set[int]:
        """Run ``reap_orphans()`` in a new Python process now; the pids it reaped."""
        async with Kit.fresh_reaper() as reap:
            return await reap()

    @staticmethod
    async def until_not_reaped_elsewhere(
        attempt: Callable[[int], Awaitable[None]], tries: int = 5
    ) -> None:
        """Run ``attempt(n)`` until one ends without ``ReapedElsewhere`` (at most ``tries``).

        A crash test's "orphans outlived the host" is a race against every other dsh process on
        the machine; losing it ``tries`` times in a row is a failure all the same, since it also
        means the orphans may have died with the host.
        """
        for n in range(tries):
            try:
                await attempt(n)
            except ReapedElsewhere:
                continue
            return
        raise AssertionError(
            f"in {tries} attempts the killed host's orphans were gone before this test's reaper "
            "ran (they died with the host, or another dsh process reaped them first each time)"
        )

    @staticmethod
    def open_fds() -> int:
        return sum(1 for _ in Path("/proc/self/fd").iterdir())

    @staticmethod
    def settle_fds(baseline: int, tolerance: int, limit: float = 5.0) -> int:
        """The fd count once it is within ``tolerance`` of ``baseline`` (or after ``limit`` s)."""
        deadline = time.monotonic() + limit
        while True:
            gc.collect()
            count = sum(1 for _ in Path("/proc/self/fd").iterdir())
            if count <= baseline + tolerance or time.monotonic() > deadline:
                return count
            time.sleep(0.05)

    @staticmethod
    def codex_provider(
        home: Path, *, env: dict[str, str] | None = None, **fields: Any
    ) -> CodexProvider:
        overlay = {**hermetic_env(home), **(env or {})}
        config = {"env": overlay, "dispose_grace_ms": 1500, "stderr": "discard", **fields}
        return CodexProvider(CodexProviderConfig.model_validate(config))

    @staticmethod
    def claude_provider(
        root: Path, base_url: str, *, env: dict[str, str] | None = None, **fields: Any
    ) -> ClaudeCodeProvider:
        overlay = {**claude_env(root, base_url), **(env or {})}
        config = {"env": overlay, "dispose_grace_ms": 1500, "stderr": "discard", **fields}
        return ClaudeCodeProvider(ClaudeCodeProviderConfig.model_validate(config))


@dataclass
class CodexSetup:
    server: FakeResponsesServer
    home: Path
    workspace: Path

    def provider(self, **fields: Any) -> CodexProvider:
        return Kit.codex_provider(self.home, **fields)

    def request(self, text: str) -> ResolvedStartRequest:
        return Kit.request(self.workspace, text, "codex")


@dataclass
class ClaudeSetup:
    server: FakeMessagesServer
    root: Path
    workspace: Path

    def provider(self, **fields: Any) -> ClaudeCodeProvider:
        return Kit.claude_provider(self.root, self.server.base_url, **fields)

    def request(self, text: str) -> ResolvedStartRequest:
        return Kit.request(self.workspace, text, "claude-code")


@pytest.fixture
def kit() -> Kit:
    return Kit()


@pytest.fixture
async def codex(tmp_path: Path) -> AsyncIterator[CodexSetup]:
    async with FakeResponsesServer() as server:
        home = write_codex_home(tmp_path / "codex-home", server.base_url, CODEX_MODEL)
        workspace = tmp_path / "codex-ws"
        workspace.mkdir()
        yield CodexSetup(server, home, workspace)


@pytest.fixture
def fresh_claude(
    tmp_path: Path,
) -> Callable[[str], contextlib.AbstractAsyncContextManager[ClaudeSetup]]:
    """``async with fresh_claude(name) as setup``: a ``claude`` of its own, for one of many
    trials in a test (a killed run can leave its queued stall unconsumed on a shared server)."""

    @contextlib.asynccontextmanager
    async def make(name: str) -> AsyncIterator[ClaudeSetup]:
        async with FakeMessagesServer() as server:
            workspace = tmp_path / f"{name}-ws"
            workspace.mkdir()
            try:
                yield ClaudeSetup(server, tmp_path / f"{name}-root", workspace)
            finally:
                server.release_stalls()

    return make


@pytest.fixture
async def claude(tmp_path: Path) -> AsyncIterator[ClaudeSetup]:
    async with FakeMessagesServer() as server:
        workspace = tmp_path / "claude-ws"
        workspace.mkdir()
        try:
            yield ClaudeSetup(server, tmp_path / "claude-root", workspace)
        finally:
            server.release_stalls()


@pytest.fixture(params=[True, False], ids=["supervised", "plain"])
def supervised(request: pytest.FixtureRequest) -> bool:
    """Each test that takes it runs twice: its host spawns under a supervisor, then plainly."""
    on: bool = request.param
    return on
