"""Containment: nothing a run starts outlives it, whatever its programs or tools do to escape.

Every escapee here has an empty environment (no tree marker), leaves its session, or has a main
thread that exited while another thread runs. Survivors are found by ``_survivors``, a walk of
``/proc`` that looks at every thread and trusts none of dsh's own bookkeeping. Each escapee
touches a ready file first, so no test passes because an escape never happened.

The last section stops the ``dsh`` command itself with SIGTERM or SIGHUP mid-tool.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_codex.testing import (
    FakeResponsesServer,
    FunctionCallItem,
    Reply,
    Stall,
)
from dsh.subprocess import (
    Collect,
    ManagedProcess,
    SpawnSpec,
    SubprocessRuntime,
    TeardownError,
    default_runtime,
    marked_processes,
)
from dsh.subprocess.testing import describe_processes

pytestmark = [pytest.mark.timeout(120)]

HERE = Path(__file__).resolve().parent
TRICKS = HERE / "escape_tricks.py"
ESCAPES_IN_A_ROW = 20
_DEAD = ("Z", "X", "x")


def _survivors(nonce: str) -> list[int]:
    """Pids with a live thread whose command line carries ``nonce`` (own walk of /proc)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            tids = [task.name for task in os.scandir(f"/proc/{entry.name}/task")]
        except OSError:
            continue
        for tid in tids:
            base = f"/proc/{entry.name}/task/{tid}"
            try:
                stat = Path(base, "stat").read_bytes()
                state = stat[stat.rindex(b")") + 2 :].split()[0].decode()
                cmdline = Path(base, "cmdline").read_bytes()
            except (OSError, ValueError, IndexError):
                continue
            if state not in _DEAD and nonce.encode() in cmdline:
                found.append(int(entry.name))
                break
    return sorted(found)


def _ready(ready_dir: Path) -> list[str]:
    return sorted(path.name for path in ready_dir.glob("*.ready"))


async def _until(predicate: Any, what: str, limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    while not await asyncio.to_thread(predicate):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def _nonce() -> str:
    return f"contain-{uuid.uuid4().hex}"


def _trick(mode: str, ready_dir: Path, nonce: str, **fields: Any) -> SpawnSpec:
    argv = [sys.executable, str(TRICKS), mode, str(ready_dir), nonce]
    return SpawnSpec(argv, **{"grace_ms": 500, "stdout": "pipe", **fields})


async def _assert_none_survive(nonce: str) -> None:
    left = await asyncio.to_thread(_survivors, nonce)
    assert left == [], f"survivors: {describe_processes(left)}"


# ---- dsh.subprocess on its own -------------------------------------------------------------


async def test_empty_env_double_fork_escapes_never_survive_a_normal_finish(
    tmp_path: Path,
) -> None:
    async with SubprocessRuntime() as runtime:
        for round_ in range(ESCAPES_IN_A_ROW):
            ready_dir = tmp_path / f"round-{round_}"
            ready_dir.mkdir()
            nonce = _nonce()
            proc = await runtime.spawn(_trick("double-fork", ready_dir, nonce))
            assert (await proc.wait()).exit_code == 0
            await _until(lambda d=ready_dir: len(_ready(d)) == 1, "the escapee to run")
            assert await asyncio.to_thread(_survivors, nonce), "the escapee must be running"
            await proc.aclose()
            await _assert_none_survive(nonce)


async def test_double_fork_from_a_sigterm_handler_never_survives(tmp_path: Path) -> None:
    async with SubprocessRuntime() as runtime:
        for round_ in range(5):
            ready_dir = tmp_path / f"round-{round_}"
            ready_dir.mkdir()
            nonce = _nonce()
            proc = await runtime.spawn(_trick("on-sigterm", ready_dir, nonce))
            assert proc.stdout is not None
            assert await asyncio.wait_for(proc.stdout.readline(), 10) == b"armed\n"
            await proc.aclose()
            await _assert_none_survive(nonce)
            # The handler ran and its escapee started, or was killed before it could touch its
            # file; either way nothing of it is left.
            assert (await proc.wait()).exit_code == 0


async def test_half_exited_direct_child_is_alive_until_killed(tmp_path: Path) -> None:
    nonce = _nonce()
    async with SubprocessRuntime() as runtime:
        proc = await runtime.spawn(_trick("half-exit", tmp_path, nonce))
        await _until(lambda: len(_ready(tmp_path)) == 1, "the lingering thread")
        await asyncio.sleep(0.3)  # the main thread has exited by now
        stat = await asyncio.to_thread(Path(f"/proc/{proc.pid}/stat").read_text)
        assert stat[stat.rindex(")") + 2] == "Z", "the main thread must have exited"
        assert await asyncio.to_thread(_survivors, nonce) == [proc.pid]
        assert proc.pid in marked_processes(proc.tree_id), "a half-exited process is seen"
        [line] = describe_processes([proc.pid])
        assert "(gone)" not in line
        assert not proc.tree_gone
        began = time.monotonic()
        await proc.aclose()  # raises TeardownError if it believes the process is unkillable
        assert time.monotonic() - began < 3.0
        await _assert_none_survive(nonce)
        assert (await proc.wait()).signal in ("SIGTERM", "SIGKILL")


async def test_half_exited_grandchild_holds_aclose_until_it_is_gone(tmp_path: Path) -> None:
    nonce = _nonce()
    async with SubprocessRuntime() as runtime:
        proc = await runtime.spawn(_trick("half-exit-child", tmp_path, nonce))
        assert (await proc.wait()).exit_code == 0
        await _until(lambda: len(_ready(tmp_path)) == 1, "the lingering thread")
        await asyncio.sleep(0.3)
        [pid] = await asyncio.to_thread(_survivors, nonce)
        assert not proc.tree_gone, "a half-exited grandchild keeps the tree alive"
        assert not await proc.wait_for_exit(0.2)
        try:
            await proc.aclose()
        except TeardownError as exc:  # pragma: no cover - the failure this test exists for
            raise AssertionError("aclose() could not take the grandchild down") from exc
        await _assert_none_survive(nonce)
        assert pid not in await asyncio.to_thread(_survivors, nonce)


async def _start_host(
    runtime: SubprocessRuntime, code: str, ready_dir: Path, nonce: str
) -> tuple[ManagedProcess, bytes]:
    """A host program (``code``) spawned through ``runtime``, and the first line it prints."""
    host = await runtime.spawn(
        SpawnSpec(
            [sys.executable, "-c", code, str(TRICKS), str(ready_dir), nonce],
            stdout="pipe",
            stderr=Collect(4096),
        )
    )
    assert host.stdout is not None
    return host, await asyncio.wait_for(host.stdout.readline(), 20)


def _host_program(main: str) -> str:
    """A host program whose ``main()`` runs ``main``, an indented block (``DOUBLE_FORK`` is the
    escapee's argv, ``sys.argv`` the host's), then stays up for a minute."""
    body = textwrap.indent(textwrap.dedent(main).strip("\n") + "\n", "    ")
    return (
        "import asyncio, json, sys\n"
        "from dsh.subprocess import SpawnSpec, default_runtime\n"
        "DOUBLE_FORK = [sys.executable, sys.argv[1], 'double-fork', sys.argv[2], sys.argv[3]]\n"
        f"async def main():\n{body}    await asyncio.sleep(60)\n"
        "asyncio.run(main())\n"
    )


async def test_reap_orphans_in_a_fresh_process_after_host_sigkill(tmp_path: Path) -> None:
    """A host that saw an empty-env escapee dies by SIGKILL; a fresh process cleans up."""
    nonce = _nonce()
    host_code = _host_program("""
        argv = [sys.executable, sys.argv[1], 'on-sigterm', sys.argv[2], sys.argv[3]]
        proc = await default_runtime().spawn(SpawnSpec(argv, stdout='pipe'))
        assert await proc.stdout.readline() == b'armed\\n'
        second = await default_runtime().spawn(SpawnSpec(DOUBLE_FORK))
        await second.wait()
        await asyncio.sleep(0.5)  # sampled: the host has observed its escapee
        print(json.dumps([proc.tree_id, second.tree_id]), flush=True)
    """)
    async with SubprocessRuntime() as runtime:
        host, line = await _start_host(runtime, host_code, tmp_path, nonce)
        assert line, host.collected("stderr").text
        tree_ids = json.loads(line)
        await _until(lambda: len(_ready(tmp_path)) == 1, "the empty-env escapee")
        assert len(await asyncio.to_thread(_survivors, nonce)) >= 2
        os.kill(host.pid, signal.SIGKILL)
        assert (await host.wait()).signal == "SIGKILL"
        reaper_code = "from dsh.subprocess import reap_orphans\nreap_orphans()\n"
        reaper = await runtime.spawn(SpawnSpec([sys.executable, "-c", reaper_code]))
        assert (await reaper.wait()).exit_code == 0
        await reaper.aclose()
        await _until(lambda: _survivors(nonce) == [], "every escapee to be gone", limit=5.0)
        for tree_id in tree_ids:
            assert marked_processes(tree_id) == []
        await host.aclose()


def _spawner_side(root: int) -> list[int]:
    """The spawner and supervisors below ``root`` (their argv names the spawner script)."""
    import psutil

    found = []
    for proc in psutil.Process(root).children(recursive=True):
        try:
            if any(part.endswith("_spawner_main.py") for part in proc.cmdline()):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


async def test_reap_orphans_uses_the_member_record_when_all_of_dsh_died(tmp_path: Path) -> None:
    """Host, spawner and supervisor all SIGKILLed at once: only the on-disk record is left."""
    nonce = _nonce()
    host_code = _host_program("""
        proc = await default_runtime().spawn(SpawnSpec(DOUBLE_FORK))
        await proc.wait()
        await asyncio.sleep(2.2)  # sampled (every 1 s): the escapee is on record
        print('observed', flush=True)
    """)
    async with SubprocessRuntime() as runtime:
        host, line = await _start_host(runtime, host_code, tmp_path, nonce)
        assert line == b"observed\n", host.collected("stderr").text
        [ready] = _ready(tmp_path)
        escapee = int(ready.split(".")[0])
        assert escapee in await asyncio.to_thread(_survivors, nonce)
        helpers = await asyncio.to_thread(_spawner_side, host.pid)
        assert helpers, "the host spawns through a spawner"
        for pid in helpers:  # frozen first, so none of them can react to the host's death
            os.kill(pid, signal.SIGSTOP)
        os.kill(host.pid, signal.SIGKILL)
        for pid in helpers:
            os.kill(pid, signal.SIGKILL)
        assert (await host.wait()).signal == "SIGKILL"
        await asyncio.sleep(0.2)
        assert escapee in await asyncio.to_thread(_survivors, nonce), "nothing else kills it"
        reaper_code = "from dsh.subprocess import reap_orphans\nprint(reap_orphans())\n"
        reaper = await runtime.spawn(
            SpawnSpec([sys.executable, "-c", reaper_code], stdout=Collect(4096))
        )
        assert (await reaper.wait()).exit_code == 0
        assert escapee in json.loads(reaper.collected("stdout").text)
        await reaper.aclose()
        await _until(lambda: _survivors(nonce) == [], "the recorded escapee to be gone", 5.0)
        await host.aclose()


# ---- the real products: a model's tool command tries to escape -----------------------------


def _escape_command(ready_dir: Path, nonce: str, how: str, then_sleep: bool, linger: str) -> str:
    """A tool command whose escapee has an empty env; ``linger`` runs after it starts.

    Codex ends a command's process group when its shell exits, which takes a plain ``&`` child
    down before it runs, so for Codex the shell lingers a second; Claude Code's Bash tool leaves
    the group alone, and there the shell returns at once, as a model's ``nohup … &`` would.
    """
    program = f"{sys.executable} {TRICKS} sleep {ready_dir} {nonce}"
    if how == "setsid":
        start = f"setsid -f env -i {program} >/dev/null 2>&1"
    else:
        start = f"nohup env -i {program} >/dev/null 2>&1 &{linger}"
    return f"{start}\nsleep 30" if then_sleep else start


async def _finish_then_check(kit: Any, run: Any, ready_dir: Path, nonce: str, cancel: bool) -> None:
    """Once the escapee runs: cancel the run or let it finish, close it, and find no survivor."""
    from dsh.subagent import StopReason

    try:
        await _until(lambda: len(_ready(ready_dir)) == 1, "the escapee to run", limit=60)
        if cancel:
            run.cancel()
            result = await run.result()
            assert result.stop_reason is StopReason.ABORTED
        else:
            result = await run.result()
            assert result.stop_reason is StopReason.COMPLETED, result.diagnostic
    finally:
        await run.aclose()
    await _assert_none_survive(nonce)
    assert await asyncio.to_thread(kit.own_marked) == []


CASES = [
    pytest.param(how, cancel, id=f"{how}-{'cancel' if cancel else 'finish'}")
    for how in ("setsid", "nohup")
    for cancel in (False, True)
]


def _escape_case(tmp_path: Path) -> tuple[str, Path]:
    """A fresh nonce, and the empty directory the escapee reports itself ready in."""
    ready_dir = tmp_path / "ready"
    ready_dir.mkdir()
    return _nonce(), ready_dir


@pytest.mark.real_product
@pytest.mark.parametrize(("how", "cancel"), CASES)
async def test_codex_tool_escapes_never_survive(
    kit: Any, codex: Any, tmp_path: Path, how: str, cancel: bool
) -> None:
    nonce, ready_dir = _escape_case(tmp_path)
    command = {
        "cmd": _escape_command(ready_dir, nonce, how, then_sleep=cancel, linger=" sleep 1"),
        "login": False,
        "yield_time_ms": 30_000,
    }
    codex.server.queue(Reply((FunctionCallItem("exec_command", command),)))
    if cancel:
        codex.server.queue(Stall((), seconds=60))
    else:
        codex.server.queue_text("started it")
    provider = codex.provider(permission_mode="dangerously-bypass-approvals-and-sandbox")
    run = await provider.start(codex.request("start a server"))
    await _finish_then_check(kit, run, ready_dir, nonce, cancel)


@pytest.mark.real_product
@pytest.mark.parametrize(("how", "cancel"), CASES)
async def test_claude_code_tool_escapes_never_survive(
    kit: Any, claude: Any, tmp_path: Path, how: str, cancel: bool
) -> None:
    nonce, ready_dir = _escape_case(tmp_path)
    command = _escape_command(ready_dir, nonce, how, then_sleep=cancel, linger="")
    claude.server.queue_tool_call("Bash", {"command": command, "description": "start a server"})
    if cancel:
        claude.server.queue_stall()
    else:
        claude.server.queue_text("started it")
    provider = claude.provider(permission_mode="bypassPermissions", env={"IS_SANDBOX": "1"})
    run = await provider.start(claude.request("start a server"))
    await _finish_then_check(kit, run, ready_dir, nonce, cancel)


# ---- the dsh command stopped by SIGTERM or SIGHUP mid-tool ------------------------------
# ``dsh run`` stopped by SIGTERM or SIGHUP mid-tool: the whole product tree exits first.
#
# ``timeout``, systemd, ``docker stop`` and a closed terminal stop a command this way. The command
# runs as a program (``sys.executable -m dsh.tool_subagent._cli run``) against a profile whose
# providers point at loopback model servers owned by this test. The model makes the real product
# run a long ``sleep`` through its own shell tool (``echo holding; sleep <unique>``: Claude
# Code's Bash tool blocks a command that is a sleep alone); once that sleep is running, the test
# signals the ``dsh run`` process and expects exit ``128 + signal``.
#
# Survivors are found without dsh's own bookkeeping: every pid under ``/proc`` counts while any of
# its threads (``/proc/<pid>/task/*``) is not a zombie, and it belongs to the run when one of those
# threads has the sleep's unique command line, a working directory inside this test's directory,
# or this test's directory in its environment.

LIMIT_S = 60.0


@dataclass
class Setup:
    root: Path
    profile: Path
    workspace: Path
    codex: FakeResponsesServer
    claude: FakeMessagesServer


@pytest.fixture
def setup(loopback: Any) -> Setup:
    profile = loopback.profile({"stderr": "discard"}, **loopback.unattended())
    return Setup(
        loopback.root, loopback.write(profile), loopback.workspace, loopback.codex, loopback.claude
    )


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
        setup.claude.queue_tool_call("Bash", {"command": sleep, "description": "hold"})
        setup.claude.queue_stall()


@pytest.mark.real_product
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


@pytest.mark.real_product
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
