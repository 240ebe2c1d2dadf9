from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest

from dsh.subprocess import (
    Collect,
    ManagedProcess,
    SpawnSpec,
    SubprocessRuntime,
    marked_processes,
)
from dsh.subprocess.testing import python_argv

pytestmark = pytest.mark.timeout(60)

IGNORE_TERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
HOST = Path(__file__).parent / "programs" / "host.py"


def gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


async def lines(proc: ManagedProcess, count: int) -> list[str]:
    assert proc.stdout is not None
    return [(await proc.stdout.readline()).decode().strip() for _ in range(count)]


async def test_term_ignoring_child_is_killed_after_grace(runtime: SubprocessRuntime) -> None:
    code = IGNORE_TERM + "print('ready', flush=True); time.sleep(60)"
    proc = await runtime.spawn(SpawnSpec([sys.executable, "-c", code], grace_ms=300))
    assert await lines(proc, 1) == ["ready"]
    start = time.monotonic()
    proc.terminate()
    outcome = await proc.wait()
    assert outcome.signal == "SIGKILL"
    assert time.monotonic() - start >= 0.28
    await proc.aclose()
    assert marked_processes(proc.tree_id) == []


async def test_grandchild_in_group_dies(runtime: SubprocessRuntime) -> None:
    argv = python_argv("""
        import os, time
        pid = os.fork()
        if pid == 0:
            time.sleep(60); os._exit(0)
        print(pid, flush=True); time.sleep(60)
    """)
    proc = await runtime.spawn(SpawnSpec(argv, grace_ms=300))
    grandchild = int((await lines(proc, 1))[0])
    assert os.getpgid(grandchild) == proc.pid
    start = time.monotonic()
    await proc.aclose()
    assert time.monotonic() - start < 0.25  # nothing ignores TERM: well inside the grace
    assert gone(grandchild)
    assert gone(proc.pid)


async def test_setsid_double_fork_term_ignorer_is_gone(runtime: SubprocessRuntime) -> None:
    argv = python_argv("""
        import os, signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                print(os.getpid(), flush=True); time.sleep(60); os._exit(0)
            os._exit(0)
        os.wait(); time.sleep(60)
    """)
    proc = await runtime.spawn(SpawnSpec(argv, grace_ms=300))
    escaped = int((await lines(proc, 1))[0])
    assert os.getsid(escaped) != proc.pid
    assert os.getpgid(escaped) != proc.pid
    assert escaped in marked_processes(proc.tree_id)
    await proc.aclose()
    assert gone(escaped)
    assert marked_processes(proc.tree_id) == []


async def test_wait_returns_within_grace_despite_pipe_holder(runtime: SubprocessRuntime) -> None:
    argv = python_argv("""
        import os, time
        if os.fork() == 0:
            time.sleep(60); os._exit(0)
        print('parent done', flush=True)
    """)
    proc = await runtime.spawn(SpawnSpec(argv, stdout=Collect(1000), grace_ms=300))
    start = time.monotonic()
    outcome = await asyncio.wait_for(proc.wait(), 5)
    assert outcome.exit_code == 0
    assert time.monotonic() - start < 1.5
    assert "parent done" in proc.collected("stdout").text
    assert not await proc.wait_for_exit(0.05)  # the pipe holder is still part of the tree
    await proc.aclose()
    assert marked_processes(proc.tree_id) == []


async def test_wait_for_exit_false_then_true(runtime: SubprocessRuntime) -> None:
    code = IGNORE_TERM + "print('ready', flush=True); time.sleep(60)"
    proc = await runtime.spawn(SpawnSpec([sys.executable, "-c", code], grace_ms=400))
    await lines(proc, 1)
    start = time.monotonic()
    proc.terminate()
    assert await proc.wait_for_exit(0.15) is False
    assert await proc.wait_for_exit(5) is True
    assert time.monotonic() - start >= 0.38
    assert proc.outcome is not None
    assert proc.outcome.signal == "SIGKILL"
    await proc.aclose()


async def test_second_terminate_does_not_restart_ladder(runtime: SubprocessRuntime) -> None:
    argv = python_argv("""
        import signal, time
        signal.signal(signal.SIGTERM, lambda *_: print('term', flush=True))
        print('ready', flush=True)
        while True: time.sleep(0.01)
    """)
    proc = await runtime.spawn(SpawnSpec(argv, grace_ms=600))
    await lines(proc, 1)
    start = time.monotonic()
    proc.terminate()
    await asyncio.sleep(0.4)
    proc.terminate()
    assert await proc.wait_for_exit(5)
    elapsed = time.monotonic() - start
    assert 0.55 <= elapsed < 0.95  # a restarted ladder would kill at about 1.0 s
    assert proc.stdout is not None
    rest = (await proc.stdout.read()).decode().split()
    assert rest == ["term"]
    await proc.aclose()


async def test_aclose_cancelled_repeatedly_still_kills(runtime: SubprocessRuntime) -> None:
    code = IGNORE_TERM + "print('ready', flush=True); time.sleep(60)"
    proc = await runtime.spawn(SpawnSpec([sys.executable, "-c", code], grace_ms=5000))
    await lines(proc, 1)
    task = asyncio.create_task(proc.aclose())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    again = asyncio.create_task(proc.aclose())  # a second, cancelled call is safe too
    await asyncio.sleep(0)
    again.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await again
    assert await proc.wait_for_exit(1.0)  # far inside the 5 s grace: the sync SIGKILL ran
    assert proc.outcome is not None
    assert proc.outcome.signal == "SIGKILL"
    await proc.aclose()


async def test_runtime_aclose_closes_every_tree() -> None:
    runtime = SubprocessRuntime()
    procs = [
        await runtime.spawn(
            SpawnSpec([sys.executable, "-c", IGNORE_TERM + "time.sleep(60)"], grace_ms=300)
        ),
        await runtime.spawn(
            SpawnSpec([sys.executable, "-c", "import time; time.sleep(60)"], grace_ms=300)
        ),
    ]
    assert len(runtime.live) == 2
    await asyncio.sleep(0.1)
    await runtime.aclose()
    assert len(runtime.live) == 0
    for proc in procs:
        assert marked_processes(proc.tree_id) == []


async def _run_host(
    runtime: SubprocessRuntime, mode: str, *extra: str, env: dict[str, str | None] | None = None
) -> tuple[ManagedProcess, dict[str, object]]:
    host = await runtime.spawn(
        SpawnSpec(
            [sys.executable, str(HOST), mode, *extra],
            env=env or {},
            stdin="pipe",
            stderr=Collect(4096),
            grace_ms=300,
        )
    )
    assert host.stdout is not None
    info: dict[str, object] = json.loads(await asyncio.wait_for(host.stdout.readline(), 10))
    return host, info


async def _until_empty(tree_id: str, limit: float = 3.0) -> list[int]:
    for _ in range(int(limit / 0.02)):
        if not marked_processes(tree_id):
            break
        await asyncio.sleep(0.02)
    return marked_processes(tree_id)


async def test_host_normal_exit_leaves_nothing(runtime: SubprocessRuntime) -> None:
    host, info = await _run_host(runtime, "exit")
    tree_id = str(info["tree_id"])
    assert len(marked_processes(tree_id)) == 2  # child and its TERM-ignoring fork
    assert host.stdin is not None
    host.stdin.write(b"go\n")
    await host.stdin.drain()
    outcome = await host.wait()
    assert outcome.exit_code == 3  # the hook did not change the status
    assert host.collected("stderr").text == ""  # and printed nothing
    assert await _until_empty(tree_id) == []
    await host.aclose()


async def test_host_sigkill_takes_its_trees_down(
    runtime: SubprocessRuntime, tmp_path: Path
) -> None:
    """The supervisors see the host's end of their sockets close, and kill their trees; the
    tree's owned dir goes with it."""
    owned = tmp_path / "owned"
    await asyncio.to_thread(owned.mkdir)
    host, info = await _run_host(runtime, "hang", env={"HOST_OWNED_DIR": str(owned)})
    tree_id = str(info["tree_id"])
    assert len(marked_processes(tree_id)) == 2
    os.kill(host.pid, signal.SIGKILL)
    assert (await host.wait()).signal == "SIGKILL"
    assert await _until_empty(tree_id) == []
    for _ in range(100):  # the supervisor removes it just before its (unread) exit report
        if not await asyncio.to_thread(owned.exists):
            break
        await asyncio.sleep(0.02)
    assert not await asyncio.to_thread(owned.exists)
    await host.aclose()


async def test_host_sigkill_then_reap_orphans(runtime: SubprocessRuntime) -> None:
    """Without supervisors (the fallback path), a fresh process reaps by the marker."""
    host, info = await _run_host(runtime, "hang", "plain")
    tree_id = str(info["tree_id"])
    pids = marked_processes(tree_id)
    assert len(pids) == 2
    os.kill(host.pid, signal.SIGKILL)
    assert (await host.wait()).signal == "SIGKILL"
    assert marked_processes(tree_id) == pids  # orphaned, still alive
    argv = python_argv(
        """
        import json, sys
        from dsh.subprocess import marked_processes, reap_orphans
        before = marked_processes(sys.argv[1])
        print(json.dumps([before, reap_orphans()]))
        """,
        tree_id,
    )
    reaper = await runtime.spawn(SpawnSpec(argv, stdout=Collect(4096)))
    assert (await reaper.wait()).exit_code == 0
    before, reaped = json.loads(reaper.collected("stdout").text)
    # A concurrent reap_orphans() in another process (e.g. a parallel suite) could beat ours.
    assert before == pids, "orphans vanished before the fresh process could reap them"
    assert set(pids) <= set(reaped)
    assert await _until_empty(tree_id) == []
    await reaper.aclose()
    await host.aclose()
