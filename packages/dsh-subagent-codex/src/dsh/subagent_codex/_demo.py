"""Codex's part of ``dsh demo``: the loopback Responses server, scripted per scenario token.

Reached through ``CodexProvider.demo()`` (see ``dsh.subagent.DemoPlan``), so the tool layer
never imports this package. Codex runs against a hermetic ``CODEX_HOME`` whose model provider
is the loopback server; it needs no key and talks only to 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from dsh.subagent import DEMO_ERROR_BODY, DemoFailure, DemoModel, DemoPlan
from dsh.subagent.kit import FailureFacts, failure_line
from dsh.subagent_codex._fake_responses import FakeResponsesServer, HttpStatus, MessageItem, Reply
from dsh.subagent_codex._hermetic_home import hermetic_env, write_codex_home
from dsh.subprocess import marked_processes

__all__ = ["DEMO_MODEL", "FAILURE", "PRODUCT", "SERVE_ANSWER", "demo_plan"]

PRODUCT = "Codex"
DEMO_MODEL = "dsh-demo-model"
SERVE_ANSWER = "Hello from Codex, through the dsh loopback model."
FAILURE = failure_line(FailureFacts(PRODUCT, "turn", "httpConnectionFailed", http_status=503))
#: A long command keeps a Codex process busy mid-turn until the demo cancels the run.
_BUSY_COMMAND = {"cmd": "sleep 30", "login": False, "yield_time_ms": 20000}


def _config(root: Path, base_url: str) -> dict[str, Any]:
    return {"env": hermetic_env(write_codex_home(root / "codex-home", base_url, DEMO_MODEL))}


class _Model:
    """The running server; each token's replies are queued with ``match=token``."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self.server = FakeResponsesServer()

    def provider_config(self) -> dict[str, Any]:
        return _config(self._root, self.server.base_url)

    def answer(self, token: str, text: str) -> None:
        self.server.queue_text(text, match=token)

    def busy(self, token: str) -> None:
        # The command runs until the demo cancels; should Codex report on it first (a follow-up
        # request of the same turn, same task), the model stalls and the turn stays busy.
        self.server.queue_tool_call("exec_command", _BUSY_COMMAND, match=token)
        self.server.queue_stall(match=token)

    def fail(self, token: str) -> DemoFailure:
        body = {"error": {"message": DEMO_ERROR_BODY, "code": "server_error"}}
        self.server.queue(HttpStatus(503, body), match=token)
        return DemoFailure("HTTP 503", FAILURE)

    def tasks_seen(self) -> list[str]:
        return [r.task or "" for r in self.server.requests]


@asynccontextmanager
async def _model(root: Path) -> AsyncIterator[DemoModel]:
    model = _Model(root)
    async with model.server:
        yield model


@asynccontextmanager
async def _serve(root: Path) -> AsyncIterator[Mapping[str, Any]]:
    async with FakeResponsesServer(default=Reply((MessageItem(SERVE_ANSWER),))) as server:
        yield _config(root, server.base_url)


def _leftover(owner_pid: int) -> list[int]:
    return marked_processes(owner_pid=owner_pid)


def demo_plan() -> DemoPlan:
    """Codex answers, runs in the background, fails safely and is stopped with ``job_kill``."""
    return DemoPlan(
        product=PRODUCT,
        scenarios=("foreground answer", "background job", "model failure", "cancel via job_kill"),
        model=_model,
        serve=_serve,
        serve_answer=SERVE_ANSWER,
        leftover_processes=_leftover,
    )
