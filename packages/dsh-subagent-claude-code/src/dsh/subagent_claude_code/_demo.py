"""Claude Code's part of ``dsh demo``: the loopback Messages server, scripted per scenario token.

Reached through ``ClaudeCodeProvider.demo()`` (see ``dsh.subagent.DemoPlan``), so the tool layer
never imports this package. Claude Code runs with a hermetic home and its API base URL on the
loopback server; it needs no key and talks only to 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from dsh.subagent import DEMO_ERROR_BODY, DemoFailure, DemoModel, DemoPlan
from dsh.subagent.kit import FailureFacts, failure_line
from dsh.subagent_claude_code._fake_server import Behaviour, FakeMessagesServer, hermetic_env
from dsh.subprocess import marked_processes

__all__ = ["FAILURE", "PRODUCT", "SERVE_ANSWER", "demo_plan"]

PRODUCT = "Claude Code"
SERVE_ANSWER = "Hello from Claude Code, through the dsh loopback model."
FAILURE = failure_line(
    FailureFacts(PRODUCT, "query-run", "authentication", http_status=401, exit_code=1)
)


def _config(root: Path, base_url: str) -> dict[str, Any]:
    return {"env": hermetic_env(root / "claude", base_url)}


class _Model:
    """The running server; each token's behaviour is queued with ``match=token``."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self.server = FakeMessagesServer()

    def provider_config(self) -> dict[str, Any]:
        return _config(self._root, self.server.base_url)

    def answer(self, token: str, text: str) -> None:
        self.server.queue_text(text, match=token)

    def busy(self, token: str) -> None:
        # The model request stalls, so the CLI stays alive mid-turn.
        self.server.queue_stall(match=token)

    def fail(self, token: str) -> DemoFailure:
        self.server.queue_http_error(401, DEMO_ERROR_BODY, match=token)
        return DemoFailure("HTTP 401", FAILURE)

    def tasks_seen(self) -> list[str]:
        return [r.task or "" for r in self.server.requests]


@asynccontextmanager
async def _model(root: Path) -> AsyncIterator[DemoModel]:
    model = _Model(root)
    async with model.server:
        yield model


@asynccontextmanager
async def _serve(root: Path) -> AsyncIterator[Mapping[str, Any]]:
    async with FakeMessagesServer(default=Behaviour("text", text=SERVE_ANSWER)) as server:
        yield _config(root, server.base_url)


def _leftover(owner_pid: int) -> list[int]:
    return marked_processes(owner_pid=owner_pid)


def demo_plan() -> DemoPlan:
    """Claude Code answers, runs in the background, fails safely and its tool call is cancelled."""
    return DemoPlan(
        product=PRODUCT,
        scenarios=("foreground answer", "background job", "model failure", "cancel the tool call"),
        model=_model,
        serve=_serve,
        serve_answer=SERVE_ANSWER,
        leftover_processes=_leftover,
    )
