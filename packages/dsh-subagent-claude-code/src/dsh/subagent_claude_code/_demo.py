"""Claude Code's part of ``dsh demo``: the loopback Messages server, scripted per scenario token.

Reached through ``ClaudeCodeProvider.demo()`` (see ``dsh.subagent.DemoPlan``), so the tool layer
never imports this package. Claude Code runs with a hermetic home and its API base URL on the
loopback server; it needs no key and talks only to 127.0.0.1. The plan's frame (servers,
per-token scripting) is the kit's ``LoopbackDemo``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsh.subagent import DEMO_ERROR_BODY, DemoFailure, DemoPlan
from dsh.subagent.kit import FailureFacts, LoopbackDemo, failure_line
from dsh.subagent_claude_code._fake_server import Behaviour, FakeMessagesServer, hermetic_env
from dsh.subprocess import marked_processes

__all__ = ["FAILURE", "PRODUCT", "SERVE_ANSWER", "demo_plan"]

PRODUCT = "Claude Code"
SERVE_ANSWER = "Hello from Claude Code, through the dsh loopback model."
FAILURE = failure_line(
    FailureFacts(PRODUCT, "query-run", "authentication", http_status=401, exit_code=1)
)


class _ClaudeCodeDemo(LoopbackDemo[FakeMessagesServer]):
    product = PRODUCT
    scenarios = ("foreground answer", "background job", "model failure", "cancel the tool call")
    serve_answer = SERVE_ANSWER

    def server(self, *, serving: bool) -> FakeMessagesServer:
        if serving:
            return FakeMessagesServer(default=Behaviour("text", text=SERVE_ANSWER))
        return FakeMessagesServer()

    def config(self, root: Path, base_url: str) -> dict[str, Any]:
        return {"env": hermetic_env(root / "claude", base_url)}

    def busy(self, server: FakeMessagesServer, token: str) -> None:
        # The model request stalls, so the CLI stays alive mid-turn.
        server.queue_stall(match=token)

    def fail(self, server: FakeMessagesServer, token: str) -> DemoFailure:
        server.queue_http_error(401, DEMO_ERROR_BODY, match=token)
        return DemoFailure("HTTP 401", FAILURE)

    def leftover_processes(self, owner_pid: int) -> list[int]:
        return marked_processes(owner_pid=owner_pid)


def demo_plan() -> DemoPlan:
    """Claude Code answers, runs in the background, fails safely and its tool call is cancelled."""
    return _ClaudeCodeDemo().plan()
