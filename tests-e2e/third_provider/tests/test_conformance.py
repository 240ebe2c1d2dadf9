"""The conformance kit against the Relay provider, on its loopback model server (the page's
step 9, as both shipped providers run it against their real products)."""

from __future__ import annotations

import os
from pathlib import Path

from dsh.subagent import ResolvedStartRequest
from dsh.subagent.testing import run_provider_conformance
from dsh.subagent_relay import RelayProvider, RelayProviderConfig
from dsh.subagent_relay.testing import FakeRelayServer, hermetic_env, make_start_request
from dsh.subprocess import marked_processes


async def test_run_provider_conformance(tmp_path: Path) -> None:
    async with FakeRelayServer() as server:
        ws = tmp_path / "ws"
        ws.mkdir()
        env = hermetic_env(tmp_path / "home", server.base_url)
        counter = iter(range(1000))

        def completing() -> ResolvedStartRequest:
            tag = f"CONFORM-{next(counter)}"
            server.queue_text(f"answer {tag}", match=tag)
            return make_start_request(ws, f"task {tag}")

        def failing() -> ResolvedStartRequest:
            tag = f"FAIL-{next(counter)}"
            server.queue_http_error(500, "boom", match=tag)
            return make_start_request(ws, f"task {tag}")

        def long() -> ResolvedStartRequest:
            tag = f"LONG-{next(counter)}"
            server.queue_stall(match=tag)
            return make_start_request(ws, f"task {tag}")

        def no_leftovers() -> None:
            assert marked_processes(owner_pid=os.getpid()) == []

        try:
            report = await run_provider_conformance(
                lambda: RelayProvider(RelayProviderConfig(env=env, dispose_grace_ms=2000)),
                make_request=completing,
                make_failing_request=failing,
                make_long_request=long,
                after_each=no_leftovers,
            )
        finally:
            server.release_stalls()
    assert {"reports_activity", "fails_safely", "cancel_mid_run"} <= set(report.passed)
    assert len(report.passed) == 11
