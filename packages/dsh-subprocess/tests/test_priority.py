"""SpawnSpec.nice: the tree runs at the requested CPU priority (and its autogroup, on Linux).

``"auto"``: full priority while few trees are busy, every busy one lowered once more are.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from dsh.subprocess import ManagedProcess, SpawnSpec, SubprocessRuntime
from dsh.subprocess._contention import Contention, contention, default_tiers

# The child starts a grandchild after the priority was set: it must inherit the value.
SLEEP_TREE = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(30)\n"
)


def _nice_of(pid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, pid)


def _autogroup_nice(pid: int) -> int | None:
    path = Path(f"/proc/{pid}/autogroup")
    if not path.exists():
        return None
    return int(path.read_text(encoding="ascii").split("nice")[1])


@pytest.mark.parametrize("nice", [-1, 20, True, 2.5, "5"])
def test_bad_nice_is_refused_naming_the_field(nice: object) -> None:
    with pytest.raises(
        ValueError, match=r"^nice must be an integer from 0 to 19, 'auto', or None$"
    ):
        SpawnSpec(["x"], nice=nice)  # type: ignore[arg-type]


async def test_nice_applies_to_the_child_its_descendants_and_its_autogroup(
    runtime: SubprocessRuntime,
) -> None:
    own = _nice_of(0)
    wanted = max(own, 7)
    spec = SpawnSpec([sys.executable, "-c", SLEEP_TREE], stdout="pipe", nice=7)
    proc = await runtime.spawn(spec)
    try:
        assert proc.stdout is not None
        grandchild = int(await proc.stdout.readline())
        assert _nice_of(proc.pid) == wanted
        assert _nice_of(grandchild) == wanted
        if sys.platform.startswith("linux"):
            assert _autogroup_nice(proc.pid) in (None, 7)
    finally:
        await proc.aclose()


async def test_a_descendant_started_at_once_has_the_nice_value_too(
    runtime: SubprocessRuntime,
) -> None:
    """A shell forks its first child within a millisecond of ``exec``: the value must already
    be set then, not after the spawn was reported (when it missed such a child)."""
    wanted = max(_nice_of(0), 7)
    spec = SpawnSpec(["/bin/sh", "-c", "sleep 30 & echo $!; wait"], stdout="pipe", nice=7)
    proc = await runtime.spawn(spec)
    try:
        assert proc.stdout is not None
        first_child = int(await proc.stdout.readline())
        assert _nice_of(first_child) == wanted
    finally:
        await proc.aclose()


async def test_without_nice_the_child_keeps_the_callers_priority(
    runtime: SubprocessRuntime,
) -> None:
    proc = await runtime.spawn(SpawnSpec([sys.executable, "-c", "import time; time.sleep(30)"]))
    try:
        assert _nice_of(proc.pid) == _nice_of(0)
        assert _autogroup_nice(proc.pid) in (None, 0)
    finally:
        await proc.aclose()


# A product-like tree: threads started before the report, and a grandchild.
THREADED_TREE = (
    "import subprocess, sys, threading, time\n"
    "for _ in range(3):\n"
    "    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(30)\n"
)


def _thread_nices(pid: int) -> list[int]:
    return [_nice_of(int(task.name)) for task in Path(f"/proc/{pid}/task").iterdir()]


async def _spawn_auto(runtime: SubprocessRuntime) -> tuple[ManagedProcess, int]:
    proc = await runtime.spawn(
        SpawnSpec([sys.executable, "-c", THREADED_TREE], stdout="pipe", nice="auto")
    )
    assert proc.stdout is not None
    return proc, int(await proc.stdout.readline())


async def _settled(check: object, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        await asyncio.sleep(0.02)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="threads' nice is Linux's")
async def test_auto_runs_a_lone_tree_at_full_priority_and_lowers_all_under_contention(
    runtime: SubprocessRuntime,
) -> None:
    own = _nice_of(0)
    assert contention.busy_count() == 0
    trees: list[tuple[ManagedProcess, int]] = []
    try:
        for _ in range(contention.calm):
            trees.append(await _spawn_auto(runtime))
        for proc, grandchild in trees:  # calm: nothing lowered
            assert _thread_nices(proc.pid) == [own] * 4  # the main thread and 3 sleepers
            assert _nice_of(grandchild) == own
            assert _autogroup_nice(proc.pid) in (None, 0)
        trees.append(await _spawn_auto(runtime))  # one more than calm: everyone is lowered
        wanted = max(own, contention.nice_for(len(trees)))

        def all_lowered() -> bool:
            return all(
                set(_thread_nices(proc.pid)) == {wanted} and _nice_of(grandchild) == wanted
                for proc, grandchild in trees
            )

        assert await _settled(all_lowered), [_thread_nices(p.pid) for p, _ in trees]
        for proc, _ in trees:
            assert _autogroup_nice(proc.pid) in (None, contention.nice_for(len(trees)))
    finally:
        for proc, _ in trees:
            await proc.aclose()
    assert contention.busy_count() == 0  # gone trees no longer count
    proc, _ = await _spawn_auto(runtime)
    try:
        assert set(_thread_nices(proc.pid)) == {own}
    finally:
        await proc.aclose()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="threads' nice is Linux's")
async def test_idle_auto_trees_do_not_count_until_put_to_work(runtime: SubprocessRuntime) -> None:
    own = _nice_of(0)
    idle: list[tuple[ManagedProcess, int]] = []
    try:
        for _ in range(contention.calm + 1):
            proc, grandchild = await _spawn_auto(runtime)
            proc.set_busy(False)  # as a warm pool does with a process waiting for work
            idle.append((proc, grandchild))
        lone, _ = await _spawn_auto(runtime)
        idle.append((lone, 0))
        await asyncio.sleep(0.3)  # a lowering would have happened by now
        assert set(_thread_nices(lone.pid)) == {own}
        assert all(set(_thread_nices(p.pid)) == {own} for p, _ in idle)
        idle[0][0].set_busy(True)  # put to work: now two are busy
        if contention.calm == 1:
            assert await _settled(lambda: set(_thread_nices(lone.pid)) == {contention.nice_for(2)})
    finally:
        for proc, _ in idle:
            await proc.aclose()
    assert contention.busy_count() == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="threads' nice is Linux's")
async def test_a_tree_spawned_idle_lowers_no_run_in_flight(runtime: SubprocessRuntime) -> None:
    own = _nice_of(0)
    lone, _ = await _spawn_auto(runtime)
    trees = [lone]
    try:
        for _ in range(contention.calm):  # as a warm pool spawns: idle until put to work
            spec = SpawnSpec([sys.executable, "-c", THREADED_TREE], nice="auto", busy=False)
            trees.append(await runtime.spawn(spec))
        assert contention.busy_count() == 1
        await asyncio.sleep(0.3)  # a lowering would have happened by now
        assert set(_thread_nices(lone.pid)) == {own}
        trees[1].set_busy(True)  # put to work: now two are busy
        if contention.calm == 1:
            assert await _settled(lambda: set(_thread_nices(lone.pid)) == {contention.nice_for(2)})
    finally:
        for proc in trees:
            await proc.aclose()
    assert contention.busy_count() == 0


def test_tiers_follow_the_cpu_count() -> None:
    assert default_tiers(2) == ((1, 0), (4, 10))
    assert default_tiers(1) == ((1, 0), (2, 10))
    assert default_tiers(8) == ((4, 0), (16, 10))
    policy = Contention(default_tiers(2))
    assert [policy.nice_for(n) for n in range(1, 7)] == [0, 10, 10, 10, 19, 19]


class _Recorder:
    def __init__(self) -> None:
        self.lowered: list[int] = []

    def lower_priority(self, nice: int) -> None:
        self.lowered.append(nice)


async def test_each_tier_lowers_every_busy_tree_once() -> None:
    policy = Contention(((1, 0), (2, 10)))
    trees = [_Recorder() for _ in range(4)]
    assert policy.start_nice() == 0
    policy.busy(trees[0])
    assert policy.start_nice() == 10
    policy.busy(trees[1], started_at=10)  # started at its tier: only the first is lowered
    policy.busy(trees[2], started_at=19)  # into the last tier: the two others go to 19
    policy.idle(trees[2])
    policy.busy(trees[3], started_at=19)  # still three busy: nothing new
    # Lowerings run in a pool of worker threads, so one tree's two may land in either order
    # (harmless: a lowering never raises a thread's priority).
    assert await _settled(lambda: sorted(trees[0].lowered) == [10, 19] and trees[1].lowered == [19])
    await asyncio.sleep(0.1)
    assert [sorted(t.lowered) for t in trees] == [[10, 19], [19], [], []]
    for tree in trees:
        policy.forget(tree)
    assert policy.busy_count() == 0
    assert policy.start_nice() == 0
