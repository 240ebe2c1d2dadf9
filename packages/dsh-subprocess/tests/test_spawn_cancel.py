"""A spawn in a worker thread: a cancel or a runtime close meanwhile never loses the child.

A gate around the real ``Popen`` holds the worker thread until the test has cancelled (or closed
the runtime), so the child is created after the caller has stopped waiting for it.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psutil
import pytest

from dsh.subprocess import SpawnError, SpawnSpec, SubprocessRuntime
from dsh.subprocess import _launch as launch_module
from dsh.subprocess import _spawn as spawn_module
from dsh.subprocess import _workers as workers_module

# The child forks a grandchild, so the take-down has a tree to clear, not just one pid.
TREE = "import os, time\nif os.fork() == 0:\n    time.sleep(60)\nelse:\n    time.sleep(60)\n"


class Gate:
    """Holds ``_popen`` in its worker thread until released; records the child's pid."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.entered = threading.Event()
        self.release = threading.Event()
        self.pids: list[int] = []

    def __call__(self, *args: Any) -> Any:
        self.entered.set()
        self.release.wait(10)
        popen = self._real(*args)
        self.pids.append(popen.pid)
        return popen


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    held = Gate(spawn_module._popen)
    monkeypatch.setattr(spawn_module, "_popen", held)
    # The worker-thread path, even with a standby waiting (test_loop_start.py has the other).
    monkeypatch.setattr(launch_module, "start_from_loop", lambda *args: None)
    yield held
    held.release.set()


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


async def _entered(gate: Gate) -> None:
    assert await asyncio.to_thread(gate.entered.wait, 10)


async def test_cancel_during_spawn_takes_the_new_tree_down(gate: Gate) -> None:
    runtime = SubprocessRuntime()
    task = asyncio.create_task(runtime.spawn(SpawnSpec([sys.executable, "-c", TREE])))
    await _entered(gate)
    task.cancel()
    await asyncio.sleep(0.05)
    assert not task.done()  # still waiting out the fork, which has not happened yet
    gate.release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(gate.pids) == 1
    assert not _alive(gate.pids[0])
    assert runtime.live == ()
    # Reaped, not left as a zombie. Under the kernel layer the run's cgroup is empty as soon as
    # the child has exited, which can be a few milliseconds before its supervisor reaps it.
    for _ in range(200):  # at most 2 s
        if not psutil.pid_exists(gate.pids[0]):
            break
        await asyncio.sleep(0.01)
    assert not psutil.pid_exists(gate.pids[0])


async def test_repeated_cancels_during_spawn_still_take_the_tree_down(gate: Gate) -> None:
    runtime = SubprocessRuntime()
    task = asyncio.create_task(runtime.spawn(SpawnSpec([sys.executable, "-c", TREE])))
    await _entered(gate)
    for _ in range(3):
        task.cancel()
        await asyncio.sleep(0.01)
    gate.release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gate.pids
    assert not _alive(gate.pids[0])
    assert runtime.live == ()


async def test_runtime_close_during_spawn_waits_and_refuses_the_process(gate: Gate) -> None:
    runtime = SubprocessRuntime()
    spawn = asyncio.create_task(runtime.spawn(SpawnSpec([sys.executable, "-c", TREE])))
    await _entered(gate)
    close = asyncio.create_task(runtime.aclose())
    await asyncio.sleep(0.05)
    assert not close.done()  # aclose() waits for the spawn in flight
    gate.release.set()
    with pytest.raises(SpawnError, match="runtime is closed"):
        await spawn
    await close
    assert gate.pids
    assert not _alive(gate.pids[0])
    assert runtime.live == ()


async def test_spawn_failure_in_the_thread_is_a_spawn_error(gate: Gate) -> None:
    gate.release.set()
    runtime = SubprocessRuntime()
    with pytest.raises(SpawnError, match="executable not found"):
        await runtime.spawn(SpawnSpec(["/definitely/missing/prog"]))
    assert gate.pids == []
    await runtime.aclose()


async def test_a_full_default_executor_does_not_stall_spawn_or_teardown() -> None:
    """The application's executor is busy; spawning and teardown use their own threads."""
    loop = asyncio.get_running_loop()
    busy = ThreadPoolExecutor(max_workers=1)
    loop.set_default_executor(busy)
    release = threading.Event()
    blocker = loop.run_in_executor(None, release.wait, 30)
    try:
        runtime = SubprocessRuntime()
        async with asyncio.timeout(10):
            proc = await runtime.spawn(SpawnSpec([sys.executable, "-c", TREE]))
            await proc.aclose()
            await runtime.aclose()
        assert proc.tree_gone
        assert not blocker.done()  # the application's work was still holding its executor
    finally:
        release.set()
        await blocker
        busy.shutdown()


async def test_cancel_while_the_spawn_is_still_queued_forks_nothing(
    gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = ThreadPoolExecutor(max_workers=1)
    monkeypatch.setattr(workers_module, "_pool", one)
    release = threading.Event()
    occupied = one.submit(release.wait, 30)  # the only worker is busy: the spawn must queue
    try:
        runtime = SubprocessRuntime()
        task = asyncio.create_task(runtime.spawn(SpawnSpec([sys.executable, "-c", TREE])))
        await asyncio.sleep(0.05)
        task.cancel()
        async with asyncio.timeout(5):  # returns at once; it does not wait behind the busy worker
            with pytest.raises(asyncio.CancelledError):
                await task
        assert not gate.entered.is_set()
        assert gate.pids == []
        assert runtime.live == ()
    finally:
        release.set()
        gate.release.set()
        occupied.result(10)
        one.shutdown()
