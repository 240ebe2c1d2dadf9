"""A tool that escapes, then kills dsh's own supervisor (and spawner): nothing may survive.

The tool command is ``kill_machinery.py`` (see there): it starts an escapee with ``setsid -f env
-i`` (no marker, a session nobody watches), walks up its own ancestry in /proc to the host, and
SIGKILLs the supervisor, or the supervisor and the spawner, or ``pkill -9 -f``s the spawner
script (narrowed to this host: the machine is shared). Each trial first proves the escapee was
alive and the targets were found and are dead; survivors are counted by a walk of /proc (psutil)
that trusts no dsh bookkeeping.

Under the kernel layer (``kernel``: root, a writable cgroup v2 group) nothing survives in any
mode. Under the fallback (``DSH_KERNEL_LAYER=off``) the docs' stated limit is what is observed:
a killed supervisor's tree is killed by the spawner within about a second; a tool that kills the
supervisor and the spawner before any scan saw its escapee leaves that escapee running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest

from dsh.subagent import StopReason
from dsh.subagent_codex.testing import FunctionCallItem, Reply, Stall
from dsh.subprocess import KERNEL_LAYER_ENV, Collect, SpawnSpec, default_runtime, kernel_layer

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(240)]

HERE = Path(__file__).resolve().parent
KILLER = HERE / "kill_machinery.py"
MODES = ("supervisor", "both", "pkill")
SPAWNER_TICK_S = 1.0
"""The spawner checks for a dead supervisor's tree once a second while idle."""


@pytest.fixture(params=["kernel", "fallback"])
def layer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "fallback":
        monkeypatch.setenv(KERNEL_LAYER_ENV, "off")
    else:
        monkeypatch.delenv(KERNEL_LAYER_ENV, raising=False)
        assert kernel_layer().active, (
            f"this machine should offer the kernel layer: {kernel_layer()}"
        )
    return str(request.param)


def escapees(nonce: str) -> list[int]:
    """Live, non-zombie escapees of this trial (blocking /proc walk, no dsh bookkeeping)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        info = proc.info
        cmdline = info["cmdline"] or ()
        if info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if any(nonce in part for part in cmdline) and any("escape_tricks" in p for p in cmdline):
            found.append(info["pid"])
    return sorted(found)


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def command(mode: str, directory: Path, nonce: str) -> list[str]:
    return [sys.executable, str(KILLER), mode, str(directory), nonce]


async def proven_attack(kit: Any, directory: Path, nonce: str, mode: str) -> dict[str, int]:
    """Prove the escapee alive and the targets found, let the tool kill, prove them dead."""
    await kit.wait_until(lambda: (directory / "targets").exists(), 60, "the tool's escape")
    targets = {
        role: int(pid)
        for role, pid in (line.split() for line in (directory / "targets").read_text().splitlines())
    }
    assert targets.get("host") == os.getpid(), f"the walk up must reach this host: {targets}"
    assert {"supervisor", "spawner"} <= set(targets), targets
    alive = await asyncio.to_thread(escapees, nonce)
    assert len(alive) == 1, f"the escapee must be alive before the attack: {alive}"
    assert (directory / f"{alive[0]}.ready").exists(), "the escapee ran"
    assert "DSH_TREE_ID" not in psutil.Process(alive[0]).environ(), "the escapee has no marker"
    assert os.getsid(alive[0]) != os.getsid(0)
    (directory / "go").touch()
    doomed = [targets["supervisor"]] + ([targets["spawner"]] if mode != "supervisor" else [])
    await kit.wait_until(
        lambda: not any(_alive(pid) for pid in doomed),
        10,
        f"the targets dead: {targets} {[where(pid) for pid in doomed]}, tool: {tools(nonce)}",
    )
    return targets


def tools(nonce: str) -> list[str]:
    """The attacking tool's processes (for a failure message)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status", "ppid"]):
        cmdline = proc.info["cmdline"] or []
        if any(nonce in part for part in cmdline) and "kill_machinery" in str(cmdline):
            found.append(f"{proc.pid} {proc.info['status']} ppid {proc.info['ppid']}")
    return found


def where(pid: int) -> str:
    """A pid's parent and cgroups, for a failure message (test output only)."""
    try:
        cgroups = Path(f"/proc/{pid}/cgroup").read_text().split("\n")
        proc = psutil.Process(pid)
        parent = psutil.Process(proc.ppid())
        return (
            f"{pid}: {cgroups[4]} {cgroups[9]}; parent {parent.pid} {parent.cmdline()[:4]} "
            f"{Path(f'/proc/{parent.pid}/cgroup').read_text().split()[9]}"
        )
    except (OSError, psutil.Error):
        return f"{pid}: gone"


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def expect_survivor(layer: str, mode: str) -> bool:
    """The documented limit of the fallback: both killed before a scan saw the escapee."""
    return layer == "fallback" and mode != "supervisor"


async def settle_survivors(layer: str, mode: str, nonce: str) -> list[int]:
    """Survivors right after the close; under the fallback's supervisor-only case, after the
    spawner's tick (its documented bound)."""
    if layer == "fallback" and mode == "supervisor":
        await asyncio.sleep(SPAWNER_TICK_S + 1.0)
    return await asyncio.to_thread(escapees, nonce)


@pytest.mark.parametrize("mode", MODES)
async def test_plain_child_that_kills_the_machinery(
    kit: Any, tmp_path: Path, layer: str, mode: str
) -> None:
    nonce = f"machinery-{uuid.uuid4().hex}"
    proc = await default_runtime().spawn(
        SpawnSpec(command(mode, tmp_path, nonce), stdout="ignore", stderr=Collect(4096))
    )
    try:
        assert proc.kernel_contained is (layer == "kernel")
        await proven_attack(kit, tmp_path, nonce, mode)
        await proc.aclose()
        survivors = await settle_survivors(layer, mode, nonce)
        if expect_survivor(layer, mode):
            assert len(survivors) == 1, "the fallback's documented gap did not show"
            assert psutil.Process(survivors[0]).ppid() == 1
        else:
            assert survivors == [], f"outlived its run: {[where(p) for p in survivors]}"
    finally:
        await proc.aclose()
        kill_all(await asyncio.to_thread(escapees, nonce))


async def run_codex(kit: Any, codex: Any, layer: str, mode: str) -> None:
    nonce = f"machinery-{uuid.uuid4().hex}"
    directory = codex.workspace / nonce
    directory.mkdir()
    cmd = " ".join(command(mode, directory, nonce))
    call = {"cmd": cmd, "login": False, "yield_time_ms": 10_000}
    codex.server.queue(Reply((FunctionCallItem("exec_command", call),)))
    codex.server.queue(Stall((), seconds=60))
    provider = codex.provider(permission_mode="dangerously-bypass-approvals-and-sandbox")
    run = await provider.start(codex.request("clean up"))
    try:
        await proven_attack(kit, directory, nonce, mode)
        await run.aclose()
        survivors = await settle_survivors(layer, mode, nonce)
        if not expect_survivor(layer, mode):
            assert survivors == [], f"outlived the Codex run: {[where(p) for p in survivors]}"
        elif survivors:
            assert psutil.Process(survivors[0]).ppid() == 1
        result = await run.result()
        if layer == "kernel":
            # The run lost its supervisor: it ends, never reports the tool's work as completed.
            assert result.stop_reason is not StopReason.COMPLETED
    finally:
        await run.aclose()
        kill_all(await asyncio.to_thread(escapees, nonce))


async def run_claude(kit: Any, claude: Any, layer: str, mode: str) -> list[int]:
    nonce = f"machinery-{uuid.uuid4().hex}"
    directory = claude.workspace / nonce
    directory.mkdir()
    cmd = " ".join(command(mode, directory, nonce))
    claude.server.queue_tool_call("Bash", {"command": cmd, "description": "clean up"})
    claude.server.queue_stall()
    provider = claude.provider(permission_mode="bypassPermissions", env={"IS_SANDBOX": "1"})
    run = await provider.start(claude.request("clean up"))
    try:
        await proven_attack(kit, directory, nonce, mode)
        await run.aclose()
        return await settle_survivors(layer, mode, nonce)
    finally:
        await run.aclose()
        kill_all(await asyncio.to_thread(escapees, nonce))
        claude.server.release_stalls()


@pytest.mark.parametrize("mode", MODES)
async def test_codex_tool_that_kills_the_machinery(
    kit: Any, codex: Any, layer: str, mode: str
) -> None:
    await run_codex(kit, codex, layer, mode)


@pytest.mark.parametrize("mode", MODES)
async def test_claude_code_tool_that_kills_the_machinery(
    kit: Any, claude: Any, layer: str, mode: str
) -> None:
    survivors = await run_claude(kit, claude, layer, mode)
    if not expect_survivor(layer, mode):
        assert survivors == [], f"outlived the Claude Code run: {[where(p) for p in survivors]}"


async def test_claude_code_tool_that_kills_its_supervisor_20_of_20(
    kit: Any, fresh_claude: Any
) -> None:
    assert kernel_layer().active, f"this machine should offer the kernel layer: {kernel_layer()}"
    began = time.monotonic()
    outcomes = []
    for trial in range(20):
        # A fresh model server per trial: a killed run leaves its queued stall unconsumed.
        async with fresh_claude(f"trial-{trial}") as setup:
            outcomes.append(await run_claude(kit, setup, "kernel", "supervisor"))
        assert time.monotonic() - began < 220, "the trials must stay bounded"
    survived = [found for found in outcomes if found]
    assert survived == [], f"survived in {len(survived)} of 20 trials"


HOST = """
import asyncio, sys
from dsh.subprocess import SpawnSpec, default_runtime, kernel_layer

async def main():
    argv = ["env", "-i", sys.executable, sys.argv[1], "sleep", sys.argv[2], sys.argv[3]]
    proc = await default_runtime().spawn(SpawnSpec(argv, stdout="ignore", stderr="ignore"))
    print(proc.pid, kernel_layer().owner, flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""


async def test_groups_of_a_host_killed_with_its_machinery_are_swept(
    kit: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Host, spawner and supervisor SIGKILLed at once, before any scan: the escapee is left
    in the dead host's group until ``reap_orphans()`` in a fresh process kills and removes it.

    The host and the reaper are spawned with this process's kernel layer off, so both sit in
    this process's own group, as two top-level processes would (a host spawned into a run's
    group makes its groups inside that group, which its parent's close removes)."""
    assert kernel_layer().active, kernel_layer()
    monkeypatch.setenv(KERNEL_LAYER_ENV, "off")  # for our spawns; scrubbed from the host's env
    nonce = f"machinery-{uuid.uuid4().hex}"
    escape = str(HERE / "escape_tricks.py")
    host = await default_runtime().spawn(
        SpawnSpec(
            [sys.executable, "-c", HOST, escape, str(tmp_path), nonce],
            stdout="pipe",
            stderr=Collect(8192),
        )
    )
    try:
        assert host.stdout is not None
        async with asyncio.timeout(30):
            line = await host.stdout.readline()
        assert line, host.collected("stderr").text
        child, owner = line.decode().split()
        await kit.wait_until(lambda: escapees(nonce) != [], 10, "the escapee")
        supervisor = psutil.Process(int(child)).ppid()
        spawner = psutil.Process(supervisor).ppid()
        assert psutil.Process(spawner).ppid() == host.pid, "host, spawner, supervisor"
        # Stopped first, so none of them can react to another's death (a supervisor that sees
        # its host gone kills its tree): "at once", whatever order the kills land in.
        for pid in (host.pid, spawner, supervisor):
            os.kill(pid, signal.SIGSTOP)
        for pid in (host.pid, spawner, supervisor):
            os.kill(pid, signal.SIGKILL)
        await host.wait()
        await asyncio.sleep(0.5)
        left = await asyncio.to_thread(escapees, nonce)
        assert len(left) == 1, "the escapee outlived every process of dsh's"
        cgroups = Path(f"/proc/{left[0]}/cgroup").read_text()  # noqa: ASYNC240
        v2_path = cgroups.split("0::", 1)[1].strip()
        dead_dir = Path("/sys/fs/cgroup/unified" + v2_path).parent
        assert dead_dir.name == owner, f"the escapee is in the dead host's group: {v2_path}"
        assert dead_dir.is_dir()
        await kit.reap_in_fresh_process()
        assert await asyncio.to_thread(escapees, nonce) == []
        assert not dead_dir.exists()
    finally:
        await host.aclose()
        kill_all(await asyncio.to_thread(escapees, nonce))
