"""Codex's part of ``dsh demo``: the loopback Responses server, scripted per scenario token.

Reached through ``CodexProvider.demo()`` (see ``dsh.subagent.DemoPlan``), so the tool layer
never imports this package. Codex runs against a hermetic ``CODEX_HOME`` whose model provider
is the loopback server; it needs no key and talks only to 127.0.0.1. The plan's frame (servers,
per-token scripting) is the kit's ``LoopbackDemo``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsh.subagent import DEMO_ERROR_BODY, DemoFailure, DemoPlan
from dsh.subagent.kit import FailureFacts, LoopbackDemo, failure_line
from dsh.subagent_codex._fake_server import FakeResponsesServer, HttpStatus, MessageItem, Reply
from dsh.subagent_codex._hermetic_home import hermetic_env, write_codex_home
from dsh.subprocess import marked_processes

__all__ = ["DEMO_MODEL", "FAILURE", "PRODUCT", "SERVE_ANSWER", "demo_plan"]

PRODUCT = "Codex"
DEMO_MODEL = "dsh-demo-model"
SERVE_ANSWER = "Hello from Codex, through the dsh loopback model."
FAILURE = failure_line(FailureFacts(PRODUCT, "turn", "httpConnectionFailed", http_status=503))
#: A long command keeps a Codex process busy mid-turn until the demo cancels the run.
_BUSY_COMMAND = {"cmd": "sleep 30", "login": False, "yield_time_ms": 20000}


class _CodexDemo(LoopbackDemo[FakeResponsesServer]):
    product = PRODUCT
    scenarios = ("foreground answer", "background job", "model failure", "cancel via job_kill")
    serve_answer = SERVE_ANSWER

    def server(self, *, serving: bool) -> FakeResponsesServer:
        answer = Reply((MessageItem(SERVE_ANSWER),))
        return FakeResponsesServer(default=answer if serving else None)

    def config(self, root: Path, base_url: str) -> dict[str, Any]:
        return {"env": hermetic_env(write_codex_home(root / "codex-home", base_url, DEMO_MODEL))}

    def busy(self, server: FakeResponsesServer, token: str) -> None:
        # The command runs until the demo cancels; should Codex report on it first (a follow-up
        # request of the same turn, same task), the model stalls and the turn stays busy.
        server.queue_tool_call("exec_command", _BUSY_COMMAND, match=token)
        server.queue_stall(match=token)

    def fail(self, server: FakeResponsesServer, token: str) -> DemoFailure:
        body = {"error": {"message": DEMO_ERROR_BODY, "code": "server_error"}}
        server.queue(HttpStatus(503, body), match=token)
        return DemoFailure("HTTP 503", FAILURE)

    def leftover_processes(self, owner_pid: int) -> list[int]:
        return marked_processes(owner_pid=owner_pid)


def demo_plan() -> DemoPlan:
    """Codex answers, runs in the background, fails safely and is stopped with ``job_kill``."""
    return _CodexDemo().plan()
