"""Conformance against the real CLI, the canary-secret rule, and the missing payload."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent import ProductFailure, StopReason
from dsh.subagent.testing import run_provider_conformance
from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subprocess import Collect, SpawnSpec, default_runtime

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(240)]

CANARY = "CANARY-7d1e9b-SECRET"


async def test_run_provider_conformance(
    server: FakeMessagesServer,
    make_provider: Any,
    make_request: Any,
    workspace: Path,
    own_marked_processes: Any,
) -> None:
    provider = make_provider(stderr="discard")
    counter = iter(range(1000))

    def completing() -> Any:
        tag = f"CONFORM-{next(counter)}"
        server.queue_text(f"answer {tag}", match=tag)
        return make_request(f"task {tag}", workspace)

    def failing() -> Any:
        tag = f"FAIL-{next(counter)}"
        server.queue_http_error(500, "boom", match=tag)
        return make_request(f"task {tag}", workspace)

    def long() -> Any:
        tag = f"LONG-{next(counter)}"
        server.queue_stall(match=tag)
        return make_request(f"task {tag}", workspace)

    def no_marked() -> None:
        assert own_marked_processes() == [], "marked processes outlived a conformance check"

    try:
        report = await run_provider_conformance(
            lambda: provider,
            make_request=completing,
            make_failing_request=failing,
            make_long_request=long,
            after_each=no_marked,
            step_timeout=60,
            cancel_after=0.3,
        )
    finally:
        server.release_stalls()
    assert "cancel_mid_run" in report.passed
    assert "fails_safely" in report.passed
    assert "reports_activity" in report.passed


async def test_canary_never_reaches_results_messages_or_logs(
    server: FakeMessagesServer,
    make_provider: Any,
    make_request: Any,
    workspace: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    os.environ["DSH_TEST_CANARY_SECRET"] = CANARY
    os.environ["PLAIN_CANARY_HOLDER"] = CANARY  # not credential-shaped: survives the scrub
    caplog.set_level(logging.DEBUG)
    try:
        # 1: canary in the model's error body; unknown model id makes the CLI print it on stderr.
        provider = make_provider(model=f"claude-{CANARY}")
        server.queue_http_error(401, f"invalid key {CANARY}")
        run = await provider.start(make_request("task one", workspace))
        first = await run.result()
        await run.aclose()
        # 2: canary in a root refusal on stderr (bypass without IS_SANDBOX) -> start failure.
        refusing = make_provider(permission_mode="bypassPermissions", model=f"claude-{CANARY}")
        with pytest.raises(ProductFailure) as caught:
            await refusing.start(make_request("task two", workspace))
    finally:
        del os.environ["DSH_TEST_CANARY_SECRET"]
        del os.environ["PLAIN_CANARY_HOLDER"]
    forwarded = capfd.readouterr().err
    assert CANARY in forwarded, "the product stderr (forwarded to the host) did carry the canary"
    assert first.stop_reason == StopReason.ERROR
    assert "authentication; HTTP status: 401" in (first.diagnostic or "")
    for text in (first.text, first.diagnostic or "", str(caught.value), repr(caught.value)):
        assert CANARY not in text
    for record in caplog.records:
        if record.levelno >= logging.INFO:
            assert CANARY not in record.getMessage()
    # The parent-env canary under a DSH_ name never reached the model request either.
    for req in server.requests:
        assert CANARY.encode() not in req.raw_body.replace(f"claude-{CANARY}".encode(), b"")


async def test_discarded_product_stderr_reaches_no_fd_of_the_host(
    server: FakeMessagesServer,
    make_provider: Any,
    make_request: Any,
    workspace: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # An unknown model id makes the CLI print it on stderr (the forwarding case above sees it).
    server.queue_http_error(401, "invalid key")
    provider = make_provider(model=f"claude-{CANARY}", stderr="discard")
    run = await provider.start(make_request("task", workspace))
    result = await run.result()
    await run.aclose()
    assert result.stop_reason == StopReason.ERROR, "the run never reached the model's refusal"
    captured = capfd.readouterr()
    assert CANARY not in captured.err
    assert CANARY not in captured.out


def _stderr_of(pid: str) -> Path:
    return Path(f"/proc/{pid}/fd/2").readlink()


@pytest.mark.parametrize("mode", ["forward", "discard"])
async def test_the_cli_writes_its_stderr_itself_and_the_host_holds_no_pipe_of_it(
    server: FakeMessagesServer, make_provider: Any, make_request: Any, workspace: Path, mode: str
) -> None:
    server.queue_stall()  # keeps the CLI alive, mid-request, while its fds are read
    run = await make_provider(stderr=mode).start(make_request("task", workspace))
    try:
        process = run._transport.process
        assert process is not None
        assert process.outcome is None, "the CLI was not alive"
        expected = _stderr_of("self") if mode == "forward" else Path(os.devnull)
        assert _stderr_of(str(process.pid)) == expected
        assert process.stderr is None
    finally:
        server.release_stalls()
        await run.aclose()


_CHILD = """
import asyncio, sys
from dsh.subagent import Descriptor, Parent, ProductFailure, ResolvedStartRequest, TextBlock
from dsh.subagent_claude_code import ClaudeCodeProvider
async def main():
    req = ResolvedStartRequest(prompt=[TextBlock("t")], parent=Parent("p", sys.argv[1]),
                               descriptor=Descriptor(provider="claude-code"))
    try:
        await ClaudeCodeProvider().start(req)
    except ProductFailure as error:
        print("FAILED:", error)
asyncio.run(main())
"""


async def test_missing_payload_fails_safely_without_host_claude(tmp_path: Path) -> None:
    import claude_agent_sdk

    real = Path(claude_agent_sdk.__file__).parent
    shadow = tmp_path / "shadow" / "claude_agent_sdk"
    shutil.copytree(real, shadow, ignore=shutil.ignore_patterns("claude", "__pycache__"))
    assert not (shadow / "_bundled" / "claude").exists()
    evidence = tmp_path / "host-claude-ran"
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "claude").write_text(f"#!/bin/sh\ntouch {evidence}\n")
    (fake_bin / "claude").chmod(0o755)
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    spec = SpawnSpec(
        argv=[sys.executable, str(script), str(tmp_path)],
        env={"PYTHONPATH": str(tmp_path / "shadow"), "PATH": f"{fake_bin}:{os.environ['PATH']}"},
        stdout=Collect(8192),
        stderr=Collect(8192),
        grace_ms=2000,
    )
    process = await default_runtime().spawn(spec)
    try:
        outcome = await process.wait()
    finally:
        await process.aclose()
    out = process.collected("stdout").text
    assert outcome.exit_code == 0, process.collected("stderr").text
    assert out.strip() == (
        "FAILED: subagent-claude-code: Product subagent failure (product: Claude Code; "
        "stage: query-start; category: unknown)"
    )
    assert not evidence.exists(), "a host claude on PATH was run"
