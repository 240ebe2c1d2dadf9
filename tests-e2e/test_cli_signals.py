"""``dsh run`` stopped by SIGTERM or SIGHUP mid-tool: the whole product tree exits first.

``timeout``, systemd, ``docker stop`` and a closed terminal stop a command this way. The command
runs as a program (``sys.executable -m dsh.tool_subagent._cli run``) against a profile whose
providers point at loopback model servers owned by this test. The model makes the real product
run a long ``sleep`` through its own shell tool (``echo holding; sleep <unique>``: Claude
Code's Bash tool blocks a command that is a sleep alone); once that sleep is running, the test
signals the ``dsh run`` process and expects exit ``128 + signal``.

Survivors are found without dsh's own bookkeeping: every pid under ``/proc`` counts while any of
its threads (``/proc/<pid>/task/*``) is not a zombie, and it belongs to the run when one of those
threads has the sleep's unique command line, a working directory inside this test's directory,
or this test's directory in its environment.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.subagent_codex.testing import (
    FakeResponsesServer,
    FunctionCallItem,
    Reply,
    Stall,
    hermetic_env,
    write_codex_home,
)
from dsh.subprocess import Collect, ManagedProcess, SpawnSpec, default_runtime

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(150)]

LIMIT_S = 60.0


@dataclass
class Setup:
    root: Path
    profile: Path
    workspace: Path
    codex: FakeResponsesServer
    claude: FakeMessagesServer


def _toml_table(name: str, values: dict[str, str]) -> str:
    lines = [f"[{name}]"] + [f"{key} = {json.dumps(value)}" for key, value in values.items()]
    return "\n".join(lines)


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    async with FakeResponsesServer() as codex, FakeMessagesServer() as claude:
        home = write_codex_home(tmp_path / "codex-home", codex.base_url, "signal-model")
        codex_config = (
            '[[provider]]\nkind = "codex"\n[provider.config]\nstderr = "discard"\n'
            'permission_mode = "dangerously-bypass-approvals-and-sandbox"'
        )
        claude_config = (
            '[[provider]]\nkind = "claude-code"\n[provider.config]\nstderr = "discard"\n'
            'permission_mode = "bypassPermissions"'
        )
        claude_vars = {**claude_env(tmp_path / "claude", claude.base_url), "IS_SANDBOX": "1"}
        profile = tmp_path / "profile.toml"
        profile.write_text(
            "\n\n".join(
                [
                    codex_config,
                    _toml_table("provider.config.env", hermetic_env(home)),
                    claude_config,
                    _toml_table("provider.config.env", claude_vars),
                ]
            )
            + "\n",
            encoding="utf-8",
        )
        yield Setup(tmp_path, profile, workspace, codex, claude)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _live_tasks(pid_dir: Path) -> list[Path]:
    """The threads of one process that are not zombies (a thread group outlives its leader)."""
    try:
        tasks = list((pid_dir / "task").iterdir())
    except OSError:  # the process is gone
        return []
    live = []
    for task in tasks:
        stat = _read(task / "stat")
        if stat and stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] not in (b"Z", b"X"):
            live.append(task)
    return live


def run_members(root: Path, token: str) -> list[int]:
    """Live pids that belong to this test's run, read from /proc alone (threads included)."""
    mine = str(root).encode()
    found = []
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit() or int(pid_dir.name) == os.getpid():
            continue
        for task in _live_tasks(pid_dir):
            try:
                cwd = os.fsencode((task / "cwd").readlink())
            except OSError:
                cwd = b""
            if (
                token.encode() in _read(task / "cmdline")
                or cwd == mine
                or cwd.startswith(mine + b"/")
                or mine in _read(task / "environ")
            ):
                found.append(int(pid_dir.name))
                break
    return sorted(found)


def _sleeping(token: str) -> list[int]:
    """Pids running exactly ``sleep <token>`` (the tool command the model asked for)."""
    argv = [b"sleep", token.encode()]
    return [
        int(pid_dir.name)
        for pid_dir in Path("/proc").iterdir()
        if pid_dir.name.isdigit()
        and any(_read(t / "cmdline").split(b"\0")[:2] == argv for t in _live_tasks(pid_dir))
    ]


async def _wait_until(check: Callable[[], bool], what: str, limit: float = LIMIT_S) -> None:
    for _ in range(int(limit / 0.1)):
        if await asyncio.to_thread(check):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"never saw {what} within {limit:.0f} s")


def _kill_leftovers(pids: list[int]) -> None:
    # Only so that a failing test leaves nothing running for the next one.
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue


async def _spawn_dsh(setup: Setup, tool: str, token: str) -> ManagedProcess:
    argv = [sys.executable, "-m", "dsh.tool_subagent._cli", "run", "--profile", str(setup.profile)]
    spec = SpawnSpec(
        argv=[*argv, "--cwd", str(setup.workspace), "--tool", tool, f"hold the tool {token}"],
        cwd=str(setup.workspace),
        stdout=Collect(1 << 16),
        stderr=Collect(1 << 16),
    )
    return await default_runtime().spawn(spec)


def _script_sleep(setup: Setup, tool: str, sleep: str) -> None:
    if tool == "subagent_codex":
        call = {"cmd": sleep, "login": False, "yield_time_ms": 30_000}
        setup.codex.queue(Reply((FunctionCallItem("exec_command", call),)), Stall((), seconds=60))
    else:
        setup.claude.queue_tool_use("Bash", {"command": sleep, "description": "hold"})
        setup.claude.queue_stall()


@pytest.mark.parametrize("tool", ["subagent_codex", "subagent_claude_code"])
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
async def test_dsh_run_stopped_by_a_signal_mid_tool_leaves_nothing(
    setup: Setup, tool: str, signum: signal.Signals, code: int
) -> None:
    token = f"4{uuid.uuid4().int % 10**8:08d}.5"  # a unique duration, e.g. sleep 412345678.5
    # Claude Code's Bash tool refuses a command that is only a long sleep, so it comes second.
    sleep = f"echo holding; sleep {token}"
    _script_sleep(setup, tool, sleep)
    proc = await _spawn_dsh(setup, tool, token)
    leftovers: list[int] = []
    try:
        await _wait_until(lambda: bool(_sleeping(token)), "the tool's sleep to run")
        before = await asyncio.to_thread(run_members, setup.root, token)
        assert len(before) >= 3, before  # dsh run, the product, its sleep (at least)
        os.kill(proc.pid, signum)
        async with asyncio.timeout(LIMIT_S):
            outcome = await proc.wait()
        leftovers = await asyncio.to_thread(run_members, setup.root, token)
        assert leftovers == [], f"survivors of dsh run after {signum.name}: {leftovers}"
        assert outcome.exit_code == code, proc.collected("stderr").text
        assert proc.collected("stdout").text == ""
    finally:
        await proc.aclose()
        setup.claude.release_stalls()
        _kill_leftovers(leftovers)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
async def test_dsh_demo_stopped_by_a_signal_mid_run_leaves_nothing(
    tmp_path: Path, signum: signal.Signals, code: int
) -> None:
    # A private TMPDIR: the demo's homes (and so its products' env) are inside this test's
    # directory, apart from any other demo running on the machine.
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    spec = SpawnSpec(
        argv=[sys.executable, "-m", "dsh.tool_subagent._cli", "demo"],
        env={"TMPDIR": str(private_tmp)},
        stdout=Collect(1 << 16),
        stderr=Collect(1 << 16),
    )
    proc = await default_runtime().spawn(spec)
    leftovers: list[int] = []
    try:

        def products_running() -> bool:
            # the demo itself and at least one product of its first scenarios
            return bool(list(private_tmp.glob("dsh-demo-*"))) and (
                len(run_members(tmp_path, str(private_tmp))) >= 2
            )

        await _wait_until(products_running, "the demo's products to run")
        os.kill(proc.pid, signum)
        async with asyncio.timeout(LIMIT_S):
            outcome = await proc.wait()
        leftovers = await asyncio.to_thread(run_members, tmp_path, str(private_tmp))
        assert leftovers == [], f"survivors of dsh demo after {signum.name}: {leftovers}"
        assert outcome.exit_code == code, proc.collected("stderr").text
        assert await asyncio.to_thread(lambda: list(private_tmp.iterdir())) == []
    finally:
        await proc.aclose()
        _kill_leftovers(leftovers)
