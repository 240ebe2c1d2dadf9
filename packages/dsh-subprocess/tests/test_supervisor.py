"""The spawner and its supervisors: lineage, exit proof, and what happens when they are attacked."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from dsh.subprocess import (
    ManagedProcess,
    SpawnError,
    SpawnSpec,
    SubprocessRuntime,
    marked_processes,
)
from dsh.subprocess import _process as process_module
from dsh.subprocess import _procfs as procfs_module
from dsh.subprocess import _spawn as spawn_module
from dsh.subprocess import _spawner as spawner_module
from dsh.subprocess.testing import python_argv

pytestmark = pytest.mark.linux_only

# The child leaves its session with a grandchild that has an empty environment, then exits.
ESCAPE = (
    "import os, sys, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        os.execve(sys.executable, [sys.executable, '-c', 'import time; time.sleep(30)',"
    " 'supervisor-escapee'], {})\n"
    "    os._exit(0)\n"
    "print('forked', flush=True)\n"
    "time.sleep(30)\n"
)


def _escapees() -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] != psutil.STATUS_ZOMBIE and "supervisor-escapee" in (
            proc.info["cmdline"] or ()
        ):
            found.append(proc.pid)
    return found


async def _until(predicate: object, limit: float = 5.0) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if await asyncio.to_thread(predicate):  # type: ignore[arg-type]
            return True
        await asyncio.sleep(0.02)
    return False


async def test_an_escapee_stays_a_descendant_of_the_supervisor(runtime: SubprocessRuntime) -> None:
    proc = await runtime.spawn(SpawnSpec([sys.executable, "-c", ESCAPE], stdout="pipe"))
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"forked\n"
    assert await _until(lambda: len(_escapees()) == 1)
    [escapee] = _escapees()
    supervisor = proc._supervised
    assert supervisor is not None
    assert psutil.Process(escapee).ppid() == supervisor.supervisor_pid
    assert psutil.Process(escapee).environ() == {}
    await proc.aclose()
    assert _escapees() == []


async def test_the_supervisors_empty_report_is_the_exit_proof_without_a_scan(
    runtime: SubprocessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    scans: list[float] = []
    real_scan = procfs_module.scan

    def counted(*args: object, **kwargs: object) -> object:
        scans.append(time.monotonic())
        return real_scan(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(process_module, "scan", counted)
    # The escapee (own session, empty env) outlives the program by a moment: only the
    # supervisor's report can say when it is gone.
    program = ESCAPE.replace("time.sleep(30)'", "time.sleep(0.3)'").replace(
        "time.sleep(30)\n", "pass\n"
    )
    proc = await runtime.spawn(SpawnSpec([sys.executable, "-c", program], stdout="pipe"))
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"forked\n"
    assert await _until(lambda: len(_escapees()) == 1)
    await proc.wait()
    assert _escapees(), "the escapee was gone before the check began"
    assert await proc.wait_for_exit(5.0)
    assert _escapees() == []
    assert marked_processes(proc.tree_id) == []
    supervisor = proc._supervised
    assert supervisor is not None
    assert supervisor.empty
    assert not supervisor.lost
    assert scans == []
    await proc.aclose()


async def test_a_killed_supervisor_hands_its_tree_to_the_spawner_which_kills_it(
    runtime: SubprocessRuntime,
) -> None:
    proc = await runtime.spawn(SpawnSpec([sys.executable, "-c", ESCAPE], stdout="pipe"))
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"forked\n"
    assert await _until(lambda: len(_escapees()) == 1)
    supervisor = proc._supervised
    assert supervisor is not None
    os.kill(supervisor.supervisor_pid, signal.SIGKILL)  # what a hostile tool could do
    assert await _until(lambda: _escapees() == [] and not psutil.pid_exists(proc.pid), 3.0)
    await proc.aclose()
    assert marked_processes(proc.tree_id) == []


async def test_a_killed_spawner_is_replaced_on_the_next_spawn(runtime: SubprocessRuntime) -> None:
    first = await runtime.spawn(SpawnSpec(["true"]))
    await first.aclose()
    spawner = spawner_module._spawner._process
    assert spawner is not None
    assert spawner.poll() is None
    spawner.kill()
    spawner.wait()
    second = await runtime.spawn(SpawnSpec([sys.executable, "-c", "print('again')"]))
    assert second.stdout is not None
    assert await second.stdout.read() == b"again\n"
    assert (await second.wait()).exit_code == 0
    await second.aclose()
    # The standby supervisors outlive their spawner (each holds its own socket to the host), so
    # this spawn may have used one; the refill after it finds the spawner dead and starts anew.
    assert await _until(lambda: _replaced(spawner.pid))


def _replaced(old_pid: int) -> bool:
    current = spawner_module._spawner._process
    return current is not None and current.pid != old_pid and current.poll() is None


async def test_spawn_errors_are_the_same_under_a_supervisor(
    runtime: SubprocessRuntime, tmp_path: Path
) -> None:
    with pytest.raises(SpawnError, match=r"executable not found \(argv\[0\]\)"):
        await runtime.spawn(SpawnSpec(["/nonexistent/program"]))
    not_executable = tmp_path / "plain.txt"
    await asyncio.to_thread(not_executable.write_text, "x")
    with pytest.raises(SpawnError, match="executable not permitted"):
        await runtime.spawn(SpawnSpec([str(not_executable)]))


async def test_the_fallback_without_a_supervisor_still_works(
    runtime: SubprocessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spawn_module, "_SUPERVISED", False)
    proc = await runtime.spawn(SpawnSpec([sys.executable, "-c", "print('plain')"]))
    assert proc._supervised is None
    assert proc.stdout is not None
    assert await proc.stdout.read() == b"plain\n"
    assert (await proc.wait()).exit_code == 0
    await proc.aclose()


async def test_the_product_gets_default_signal_dispositions(runtime: SubprocessRuntime) -> None:
    argv = python_argv("""
        import signal
        print(
            signal.getsignal(signal.SIGHUP) is signal.SIG_DFL,
            signal.getsignal(signal.SIGTERM) is signal.SIG_DFL,
        )
    """)
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    with spawner_module._spawner._lock:
        spawner_module._spawner._discard()  # the next spawn starts a spawner under SIG_IGN
    try:
        proc = await runtime.spawn(SpawnSpec(argv))
        assert proc.stdout is not None
        assert await proc.stdout.read() == b"True True\n"
        await proc.aclose()
    finally:
        signal.signal(signal.SIGHUP, previous)


STUBBORN = (
    "import os, signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "if os.fork() == 0:\n"
    "    time.sleep(30)\n"
    "print('ready', flush=True)\n"
    "time.sleep(30)\n"
)


async def _stubborn(runtime: SubprocessRuntime) -> ManagedProcess:
    proc = await runtime.spawn(
        SpawnSpec([sys.executable, "-c", STUBBORN], stdout="pipe", grace_ms=5000)
    )
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"ready\n"
    return proc


async def test_a_cancelled_aclose_returns_only_after_the_tree_is_gone(
    runtime: SubprocessRuntime,
) -> None:
    proc = await _stubborn(runtime)
    closing = asyncio.create_task(proc.aclose())
    await asyncio.sleep(0.1)  # in the grace period: SIGTERM ignored, SIGKILL not yet due
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert proc.tree_gone, "a cancelled aclose() must still prove the tree gone"
    assert marked_processes(proc.tree_id) == []


async def test_a_cancelled_runtime_close_returns_only_after_every_tree_is_gone() -> None:
    runtime = SubprocessRuntime()
    procs = [await _stubborn(runtime) for _ in range(2)]
    closing = asyncio.create_task(runtime.aclose())
    await asyncio.sleep(0.1)
    for _ in range(3):  # cancelled again and again, as a cancel scope would
        closing.cancel()
        await asyncio.sleep(0)
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert all(proc.tree_gone for proc in procs)
    assert runtime.live == ()


def test_a_full_member_record_keeps_the_lines_of_live_processes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from dsh.subprocess import _record
    from dsh.subprocess._procfs import read_info

    monkeypatch.setattr(_record, "_private_dir", lambda: tmp_path)
    monkeypatch.setattr(_record, "_MAX_BYTES", 64)
    record = _record.MemberRecord()
    me = psutil.Process()
    own_start = read_info(me.pid)
    assert own_start is not None
    record.add("1:2", [(me.pid, own_start.start)])
    record.add("1:2", [(999_999_999, 1.0)] * 8)  # gone processes, past the limit
    record.add("1:2", [(999_999_998, 1.0)])  # the next write compacts
    [(_, owner, members)] = list(_record.owner_records())
    assert owner == (1, 2.0)
    assert (me.pid, own_start.start) in members
    assert (999_999_999, 1.0) not in members


async def test_standby_supervisors_are_refilled_by_one_thread(
    runtime: SubprocessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spawner_module, "_REFILL_DELAY_S", 1.0)
    spawner = spawner_module._spawner
    spec = SpawnSpec(argv=[sys.executable, "-c", "pass"])
    for _ in range(4):
        proc = await runtime.spawn(spec)
        await proc.aclose()
    # Within the delay: the refills are pending on one thread, not a timer thread each.
    waiting = [t for t in threading.enumerate() if isinstance(t, threading.Timer)]
    refillers = [t for t in threading.enumerate() if t.name == "dsh-standby-refill"]
    assert waiting == []
    assert len(refillers) == 1

    def refilled() -> bool:
        with spawner._lock:
            return len(spawner._standby) == spawner_module._STANDBY

    assert await _until(refilled)


async def test_a_tree_that_ends_with_its_program_is_reported_in_one_write(
    runtime: SubprocessRuntime, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    chunks: list[bytes] = []
    real = spawner_module.SupervisedChild.take_reports

    def recorded(self: spawner_module.SupervisedChild, data: bytes) -> None:
        chunks.append(data)
        real(self, data)

    monkeypatch.setattr(spawner_module.SupervisedChild, "take_reports", recorded)
    # It runs a moment, so the start report is read on its own and the host is idle at the exit;
    # its owned dir takes the supervisor a while to remove between the exit and the tree's end.
    owned = tmp_path / "owned"
    owned.mkdir()
    for index in range(500):
        (owned / str(index)).write_bytes(b"x")
    code = "import time; time.sleep(0.3)"
    proc = await runtime.spawn(SpawnSpec([sys.executable, "-c", code], owned_dir=owned))
    assert (await proc.wait()).exit_code == 0
    await proc.aclose()
    supervisor = proc._supervised
    assert supervisor is not None
    assert supervisor.empty
    # The exit status and the end of the tree came together: the host woke once for both.
    assert any(b"X " in chunk and chunk.endswith(b"E\n") for chunk in chunks), chunks
    assert not owned.exists()
