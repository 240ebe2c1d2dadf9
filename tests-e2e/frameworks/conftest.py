"""Shared fixture of the framework adapter suites: both real products behind a harness.

Test modules never import this file: they get a :class:`Products` from the ``products``
fixture, which starts the loopback model servers of both products in this process and builds a
harness from a profile mapping that points the real Codex and the real Claude Code at them. The
leak guard of ``tests-e2e/conftest.py`` applies on top.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dsh.jobs import JobOwner, JobStatus
from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_codex.testing import (
    FakeResponsesServer,
    HttpStatus,
)
from dsh.tool_subagent import Caller, Harness

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
    #: Both loopback model servers and their hermetic homes (``tests-e2e/conftest.py``).
    loopback: Any
    #: The harness with both products' servers, scripted per product (``tests-e2e/conftest.py``).
    session: Any
    #: In each product's failure body; never in anything the agent's model is sent.
    canary: str = CANARY
    codex_failure: str = CODEX_FAILURE
    claude_failure: str = CLAUDE_FAILURE

    def trees(self) -> list[int]:
        """A /proc walk: live processes of the trees this test process spawned."""
        trees: list[int] = self.session.own_trees()
        return trees

    def queue_answers(self) -> None:
        """Each product answers a foreground (``FG``) and a background (``BG``) prompt."""
        for when in ("foreground", "background"):
            match = when[0].upper() + "G"
            self.codex.queue_text(f"codex {when} answer", match=f"{match} codex")
            self.claude.queue_text(f"claude {when} answer", match=f"{match} claude")

    #: The tool calls that start a background job per product: (tool, call id, arguments).
    background_calls = (
        ("subagent_codex", "bg-codex", {"description": "bg codex", "prompt": "BG codex"}),
        ("subagent_claude_code", "bg-claude", {"description": "bg claude", "prompt": "BG claude"}),
    )

    def fail_both(self) -> None:
        """The next turn of each product fails with an error body that carries the canary."""
        self.codex.queue(HttpStatus(500, {"error": {"message": CANARY}}))
        self.claude.queue_http_error(401, CANARY)

    def hold_both_mid_turn(self) -> None:
        """The next turn of each stays busy: Codex runs ``sleep 30``, Claude's request stalls."""
        for product in self.loopback.products:
            self.session.hold_mid_turn(product)

    def write_profile(self, path: Path) -> Path:
        """The profile as a TOML file (for a program that builds its own harness)."""
        written: Path = self.loopback.write(self.profile, path)
        return written

    async def settled(self, owner: JobOwner, count: int) -> None:
        """Wait (bounded) until ``count`` of the owner's jobs are terminal, reading no output
        (a read would mark a job reported, and a reported job brings no notice)."""
        async with asyncio.timeout(90):
            while sum(s.terminal for s in self.harness.jobs.list(owner)) < count:  # noqa: ASYNC110 - bounded poll
                await asyncio.sleep(0.05)

    @staticmethod
    def assert_listed(job_list: str, jobs: dict[str, str]) -> list[str]:
        """``job_list``'s text once both background jobs (``jobs["bg-codex"]`` and
        ``jobs["bg-claude"]``) completed: each listed, then each one's notice; the products."""
        products = ["codex", "claude"]
        listing, _, notices = job_list.partition("\n\n")
        assert sorted(listing.splitlines()) == sorted(
            f"{jobs[f'bg-{p}']} [subagent] completed — bg {p}" for p in products
        )
        assert sorted(notices.splitlines()) == sorted(
            f"background job {jobs[f'bg-{p}']} (subagent: bg {p}) finished [status: completed]."
            " Read its output with job_output."
            for p in products
        )
        return products

    async def cancel_mid_turn(
        self,
        run: asyncio.Future[Any],
        cancel: Callable[[], object] | None = None,
        raises: type[BaseException] = asyncio.CancelledError,
    ) -> None:
        """Once both products are mid-turn in ``run``, cancel it (``cancel()``, else
        ``run.cancel()``): it raises ``raises``, and no tree is left the moment it returns (no
        settling)."""
        await self.both_mid_turn()
        assert len(self.trees()) >= 3  # two product trees, Codex's with its `sleep 30`
        (cancel or run.cancel)()
        with pytest.raises(raises):
            await run
        assert self.trees() == []

    def assert_running(self, owner: JobOwner, job_id: str) -> None:
        """The owner's one job is ``job_id``, and it has not ended."""
        (job,) = self.harness.jobs.list(owner)
        assert job.id == job_id
        assert not job.terminal

    def assert_killed_with_its_owner(self, owner: JobOwner, job_id: str) -> None:
        """Once the owner closed: no tree is left, and its one job, ``job_id``, was killed (the
        record stays readable)."""
        assert self.trees() == []
        (job,) = self.harness.jobs.list(owner)
        assert (job.id, job.status) == (job_id, JobStatus.KILLED)

    async def both_mid_turn(self) -> None:
        """Wait until Codex's ``sleep 30`` runs and Claude Code's request is stalled."""
        assert await self.claude.wait_for_requests(1, timeout=60)
        async with asyncio.timeout(60):
            while not await asyncio.to_thread(self.session.sleep_running):  # noqa: ASYNC110 - bounded poll
                await asyncio.sleep(0.05)


@pytest.fixture
async def products(loopback: Any) -> AsyncIterator[Products]:
    profile = loopback.profile()
    caller = Caller("frameworks", str(loopback.workspace))
    async with loopback.session(profile, caller) as session:
        yield Products(
            session.harness,
            loopback.codex,
            loopback.claude,
            loopback.workspace,
            profile,
            loopback,
            session,
        )
