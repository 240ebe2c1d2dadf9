"""Relay's part of ``dsh demo``: its loopback model, scripted per scenario token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsh.subagent import DEMO_ERROR_BODY, DemoFailure, DemoPlan
from dsh.subagent.kit import FailureFacts, LoopbackDemo, failure_line
from dsh.subagent_relay._fake_server import Behaviour, FakeRelayServer, hermetic_env
from dsh.subagent_relay._mapping import PRODUCT
from dsh.subprocess import marked_processes

__all__ = ["FAILURE", "SERVE_ANSWER", "demo_plan"]

SERVE_ANSWER = "Hello from Relay, through the dsh loopback model."
FAILURE = failure_line(FailureFacts(PRODUCT, "reply", "server", http_status=503))


class _RelayDemo(LoopbackDemo[FakeRelayServer]):
    product = PRODUCT
    scenarios = ("foreground answer", "background job", "model failure", "cancel via job_kill")
    serve_answer = SERVE_ANSWER

    def server(self, *, serving: bool) -> FakeRelayServer:
        if serving:
            return FakeRelayServer(default=Behaviour("text", text=SERVE_ANSWER))
        return FakeRelayServer()

    def config(self, root: Path, base_url: str) -> dict[str, Any]:
        return {"env": hermetic_env(root / "relay", base_url)}

    def busy(self, server: FakeRelayServer, token: str) -> None:
        server.queue_stall(match=token)

    def fail(self, server: FakeRelayServer, token: str) -> DemoFailure:
        server.queue_http_error(503, DEMO_ERROR_BODY, match=token)
        return DemoFailure("HTTP 503", FAILURE)

    def leftover_processes(self, owner_pid: int) -> list[int]:
        return marked_processes(owner_pid=owner_pid)


def demo_plan() -> DemoPlan:
    """Relay answers, runs in the background, fails safely and is stopped with ``job_kill``."""
    return _RelayDemo().plan()
