"""A supervised spawn with a standby waiting starts from the event loop, with no worker thread.

Each test first waits until a standby supervisor is forked and waiting, so the path under test
is the one taken (and checks that it was).
"""

from __future__ import annotations

import asyncio
import functools
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import psutil
import pytest

from dsh.subprocess import SpawnSpec, SubprocessRuntime
from dsh.subprocess import _launch as launch_module
from dsh.subprocess import _loop_start as loop_start_module
from dsh.subprocess import _spawn as spawn_module
from dsh.subprocess import _spawner as spawner_module
from dsh.subprocess import _start_request as start_request_module
from dsh.subprocess import _workers as workers_module
from dsh.subprocess._spawner import GroupJoinFailed

pytestmark = [pytest.mark.linux_only, pytest.mark.timeout(60)]


def _program(token: str) -> list[str]:
    """Prints ``ready`` and sleeps, with a grandchild, both carrying ``token`` in their argv."""
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    return [sys.executable, "-c", code, token]


async def _until(predicate: Callable[[], bool], limit: float = 5.0) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.05)
    return False


def _carrying(token: str) -> list[int]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] != psutil.STATUS_ZOMBIE and token in (proc.info["cmdline"] or ()):
            found.append(proc.pid)
    return found


async def _standby_waiting(runtime: SubprocessRuntime) -> None:
    """Until a standby supervisor waits (the first spawn of a host starts the spawner)."""
    warm = await runtime.spawn(SpawnSpec(["true"]))
    await warm.aclose()
    assert await _until(lambda: bool(spawner_module._spawner._standby), 10.0), "no standby"


@pytest.fixture
def worker_spawns(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The spawns handed to a worker thread, directly or through ``offload`` (each still runs)."""
    seen: list[Any] = []
    real = workers_module.submit

    def recorded(func: Any, *args: Any) -> Any:
        target = func.func if isinstance(func, functools.partial) else func
        if target is spawn_module.spawn_child:
            seen.append(func)
        return real(func, *args)

    monkeypatch.setattr(launch_module, "submit", recorded)
    monkeypatch.setattr(workers_module, "submit", recorded)  # what offload() calls
    return seen


async def test_a_spawn_with_a_waiting_standby_uses_no_worker_thread(
    runtime: SubprocessRuntime, worker_spawns: list[Any]
) -> None:
    await _standby_waiting(runtime)
    worker_spawns.clear()
    token = f"loop-start-{uuid.uuid4().hex}"
    proc = await runtime.spawn(SpawnSpec(_program(token)))
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"ready\n"
    assert proc._supervised is not None
    assert worker_spawns == []
    await proc.aclose()
    assert _carrying(token) == []


async def test_cancelled_while_awaiting_the_start_report_leaves_nothing(
    runtime: SubprocessRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _standby_waiting(runtime)
    sent: list[Any] = []
    real_send = start_request_module.send_request

    def recorded(*args: Any, **kwargs: Any) -> Any:
        request = real_send(*args, **kwargs)
        sent.append(request)
        return request

    monkeypatch.setattr(loop_start_module, "send_request", recorded)
    token = f"loop-cancel-{uuid.uuid4().hex}"
    spawning = asyncio.ensure_future(runtime.spawn(SpawnSpec(_program(token))))
    await asyncio.sleep(0)  # one step: the request is out, the start report not yet read
    assert len(sent) == 1
    assert not spawning.done()
    spawning.cancel()
    with pytest.raises(asyncio.CancelledError):
        await spawning
    assert _carrying(token) == []  # the program the supervisor started is already gone
    await asyncio.sleep(0.5)
    assert _carrying(token) == []  # and nothing starts late: that start was taken down
    assert runtime.live == ()


async def test_a_failed_start_from_the_loop_falls_back_to_a_worker_thread(
    runtime: SubprocessRuntime, monkeypatch: pytest.MonkeyPatch, worker_spawns: list[Any]
) -> None:
    await _standby_waiting(runtime)
    worker_spawns.clear()
    real_parse = start_request_module.parse_start
    failed: list[bool] = []

    def once_failing(received: bytes, cwd: str | None) -> tuple[int, int, bytes]:
        real_parse(received, cwd)  # the supervisor did start the program: it must go again
        if not failed:
            failed.append(True)
            raise GroupJoinFailed("as if the standby's cgroup could not be joined")
        raise AssertionError("only the first start comes from the loop")

    monkeypatch.setattr(loop_start_module, "parse_start", once_failing)
    token = f"loop-fallback-{uuid.uuid4().hex}"
    proc = await runtime.spawn(SpawnSpec(_program(token)))
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"ready\n"
    assert failed == [True]
    assert len(worker_spawns) == 1  # the retry ran in a worker thread
    # The abandoned start is killed by its own supervisor, a moment later.
    assert await _until(lambda: len(_carrying(token)) == 2)
    assert len(_carrying(token)) == 2  # the retry's program and its grandchild, nothing else
    await proc.aclose()
    assert _carrying(token) == []
