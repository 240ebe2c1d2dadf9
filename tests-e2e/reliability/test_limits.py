"""Per-run limits (the kernel layer): a run that hits one ends with a safe fact that says so.

Every allocation and fork bomb here is bounded in the program itself (``hog.py``: a size, a
count and a time) and runs only inside a limited group: each test first asserts the kernel
layer is active (this machine kind is root with cgroups), so nothing unbounded ever starts.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Literal

import pytest

from dsh.subagent import ProductFailure, StopReason
from dsh.subagent_codex.testing import FunctionCallItem, MessageItem, Reply, Stall
from dsh.subprocess import (
    KERNEL_LAYER_ENV,
    Collect,
    Limits,
    ManagedProcess,
    SpawnError,
    SpawnSpec,
    default_runtime,
    kernel_layer,
)

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(120)]

HOG = Path(__file__).resolve().parent / "hog.py"
MIB = 1 << 20


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KERNEL_LAYER_ENV, raising=False)
    layer = kernel_layer()
    assert layer.active, layer
    assert {"memory", "tasks"} <= layer.limit_keys(), layer


def queue_hog(codex: Any, tmp_path: Path, args: str, *, match: str) -> Path:
    """Script the Codex model to run ``hog.py <args> <dir>`` and then stall; the dir."""
    directory = tmp_path / f"hog-{uuid.uuid4().hex}"
    directory.mkdir()
    call = {
        "cmd": f"{sys.executable} {HOG} {args} {directory}",
        "login": False,
        "yield_time_ms": 30_000,
    }
    codex.server.queue(Reply((FunctionCallItem("exec_command", call),)), match=match)
    codex.server.queue(Stall((), seconds=60), match=match)
    return directory


def read_int_pair(path: Path) -> tuple[int, int]:
    first, second = path.read_text().split()
    return int(first), int(second)


async def _hog(
    tmp_path: Path, how: str, limits: Limits, stderr: Collect | Literal["ignore"] = "ignore"
) -> ManagedProcess:
    """The hog program (``how``: what it takes and how much) spawned under ``limits``; it
    writes its reports into ``tmp_path``."""
    argv = [sys.executable, str(HOG), *how.split(), str(tmp_path)]
    spec = SpawnSpec(argv, stdout="ignore", stderr=stderr, limits=limits)
    return await default_runtime().spawn(spec)


async def test_memory_limit_ends_the_tree_and_says_so(
    kit: Any, tmp_path: Path, kernel: None
) -> None:
    proc = await _hog(tmp_path, "memory 512", Limits(memory=64 * MIB), stderr=Collect(4096))
    async with proc:
        assert proc.kernel_contained
        assert await proc.wait_for_exit(30), "the tree must end at its limit"
    assert proc.limits_hit == ("memory",)
    held = int((tmp_path / "held").read_text())
    assert 16 <= held < 64, f"held {held} MiB under a 64 MiB limit"
    assert proc.outcome is not None
    assert proc.outcome.signal == "SIGKILL"


async def test_fork_bomb_stops_at_the_task_limit_and_the_machine_stays_responsive(
    kit: Any, tmp_path: Path, kernel: None
) -> None:
    proc = await _hog(tmp_path, "forks 400", Limits(tasks=32))
    async with proc:
        await kit.wait_until(lambda: (tmp_path / "forks").exists(), 10, "the bomb to start")
        # The machine answers while the bomb runs: a spawn outside the group completes at once.
        began = time.monotonic()
        probe = await default_runtime().spawn(SpawnSpec(["true"], stdout="ignore", stderr="ignore"))
        async with probe:
            assert (await probe.wait()).exit_code == 0
        assert time.monotonic() - began < 2.0
        assert await proc.wait_for_exit(30), "the tree must end at its limit"
    forked, refused = read_int_pair(tmp_path / "forks")
    assert refused >= 1, "the bomb never met the limit"
    assert forked <= 32, f"{forked} forks under a limit of 32 tasks"
    assert proc.limits_hit == ("tasks",)


async def test_limits_without_the_kernel_layer_fail_before_spawning(
    monkeypatch: pytest.MonkeyPatch, kit: Any
) -> None:
    monkeypatch.setenv(KERNEL_LAYER_ENV, "off")
    with pytest.raises(SpawnError, match=r"limits\.memory cannot be enforced"):
        await default_runtime().spawn(SpawnSpec(["true"], limits=Limits(memory=64 * MIB)))
    best = SpawnSpec(["true"], stdout="ignore", limits=Limits(memory=64 * MIB, best_effort=True))
    proc = await default_runtime().spawn(best)
    async with proc:
        assert (await proc.wait()).exit_code == 0
    assert not proc.kernel_contained


async def test_codex_provider_refuses_unenforceable_limits_before_spawning(
    monkeypatch: pytest.MonkeyPatch, kit: Any, codex: Any
) -> None:
    monkeypatch.setenv(KERNEL_LAYER_ENV, "off")
    provider = codex.provider(limits={"memory": "1G"})
    before = await asyncio.to_thread(kit.own_marked)
    with pytest.raises(ProductFailure) as raised:
        await provider.start(codex.request("hello"))
    assert "limits.memory cannot be enforced" in str(raised.value)
    assert "limits_best_effort" in str(raised.value)
    assert codex.server.requests == []
    assert await asyncio.to_thread(kit.own_marked) == before
    codex.server.queue(Reply((MessageItem("best effort"),)))
    loose = codex.provider(limits={"memory": "1G"}, limits_best_effort=True)
    run = await loose.start(codex.request("hello"))
    try:
        result = await run.result()
    finally:
        await run.aclose()
    assert result.stop_reason is StopReason.COMPLETED, result.diagnostic


async def _held_under_the_limit(
    kit: Any, product: Any, limited: Any, hog_dir: Path, limit_mib: int, wait_s: float
) -> None:
    """The ``hog`` run of ``limited`` ends with the memory fact once its tool held less than
    ``limit_mib``, while a ``neighbour`` run of an unlimited provider beside it completes."""
    neighbour = product.provider()
    run = await limited.start(product.request("hog"))
    other = await neighbour.start(product.request("neighbour"))
    try:
        result, other_result = await asyncio.wait_for(
            asyncio.gather(run.result(), other.result()), wait_s
        )
    finally:
        await run.aclose()
        await other.aclose()
    assert result.stop_reason is StopReason.ERROR
    assert result.diagnostic is not None
    assert kit.is_safe_diagnostic(result.diagnostic), result.diagnostic
    assert "category: resource-limit; limit: memory" in result.diagnostic
    held = int((hog_dir / "held").read_text())
    assert 16 <= held < limit_mib, f"the tool held {held} MiB under a {limit_mib} MiB limit"
    assert other_result.stop_reason is StopReason.COMPLETED, other_result.diagnostic


async def test_codex_tool_past_its_memory_limit_ends_the_run_with_the_fact(
    kit: Any, codex: Any, tmp_path: Path, kernel: None
) -> None:
    # Requests are matched by their prompt: the limited run gets the tool, the other a reply.
    hog_dir = queue_hog(codex, tmp_path, "memory 2048", match="hog")
    codex.server.queue(Reply((MessageItem("the other run's answer"),)), match="neighbour")
    limited = codex.provider(
        permission_mode="dangerously-bypass-approvals-and-sandbox", limits={"memory": "512M"}
    )
    await _held_under_the_limit(kit, codex, limited, hog_dir, 512, 60)
    assert os.getpid() > 0  # the host is this process: it is still here to check


async def test_claude_code_tool_past_its_memory_limit_ends_the_run_with_the_fact(
    kit: Any, claude: Any, tmp_path: Path, kernel: None
) -> None:
    hog_dir = tmp_path / f"hog-{uuid.uuid4().hex}"
    hog_dir.mkdir()
    command = f"{sys.executable} {HOG} memory 2048 {hog_dir}"
    claude.server.queue_tool_call("Bash", {"command": command, "description": "hog"}, match="hog")
    claude.server.queue_stall(match="hog")
    claude.server.queue_text("the other run's answer", match="neighbour")
    limited = claude.provider(
        permission_mode="bypassPermissions", env={"IS_SANDBOX": "1"}, limits={"memory": "768M"}
    )
    await _held_under_the_limit(kit, claude, limited, hog_dir, 768, 90)


async def test_codex_tool_fork_bomb_stops_at_the_task_limit(
    kit: Any, codex: Any, tmp_path: Path, kernel: None
) -> None:
    bomb_dir = queue_hog(codex, tmp_path, "forks 600", match="bomb")
    provider = codex.provider(
        permission_mode="dangerously-bypass-approvals-and-sandbox", limits={"tasks": 128}
    )
    run = await provider.start(codex.request("bomb"))
    try:
        await kit.wait_until(lambda: (bomb_dir / "forks").exists(), 30, "the bomb to start")
        began = time.monotonic()
        probe = await default_runtime().spawn(SpawnSpec(["true"], stdout="ignore", stderr="ignore"))
        async with probe:
            assert (await probe.wait()).exit_code == 0
        assert time.monotonic() - began < 2.0, "the machine must stay responsive"
        result = await asyncio.wait_for(run.result(), 60)
    finally:
        await run.aclose()
    assert result.diagnostic is not None
    assert kit.is_safe_diagnostic(result.diagnostic), result.diagnostic
    assert "category: resource-limit; limit: tasks" in result.diagnostic
    forked, refused = read_int_pair(bomb_dir / "forks")
    assert refused >= 1, "the bomb never met the limit"
    assert forked < 128, f"{forked} forks under a limit of 128 tasks"
