"""The run's cgroup at the end of a supervised tree: removed by the supervisor when it can be.

This machine kind runs the kernel layer (root, a writable cgroup v2 hierarchy); each test first
asserts that it is active, so it fails rather than passes vacuously elsewhere.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from dsh.subprocess import (
    KERNEL_LAYER_ENV,
    Limits,
    ManagedProcess,
    SpawnSpec,
    SubprocessRuntime,
    kernel_layer,
    marked_processes,
)
from dsh.subprocess import _cgroup as cgroup_module

pytestmark = [pytest.mark.linux_only, pytest.mark.timeout(60)]

# Leaves a session-leaving escapee that ignores SIGTERM and outlives it by 0.3 s.
ESCAPEE = Path(__file__).parent / "programs" / "escapee.py"
SLEEPER = "import time\nprint('ready', flush=True)\ntime.sleep(30)\n"


@pytest.fixture
def host_group_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``RunGroup.remove`` and ``populated`` as the host's process calls them (still real)."""
    monkeypatch.delenv(KERNEL_LAYER_ENV, raising=False)
    assert kernel_layer().active, kernel_layer()
    calls: list[str] = []
    real_remove = cgroup_module.RunGroup.remove
    real_populated = cgroup_module.RunGroup.populated

    def remove(self: cgroup_module.RunGroup) -> bool:
        calls.append("remove")
        return real_remove(self)

    def populated(self: cgroup_module.RunGroup) -> bool:
        calls.append("populated")
        return real_populated(self)

    monkeypatch.setattr(cgroup_module.RunGroup, "remove", remove)
    monkeypatch.setattr(cgroup_module.RunGroup, "populated", populated)
    return calls


async def _started(runtime: SubprocessRuntime, spec: SpawnSpec, line: bytes) -> ManagedProcess:
    proc = await runtime.spawn(spec)
    assert proc.stdout is not None
    assert await proc.stdout.readline() == line
    return proc


def _group_dir(proc: ManagedProcess) -> Path:
    group = proc._group
    assert group is not None, "the tree is not in a run group"
    assert group.v2.is_dir()
    return group.v2


async def test_without_limits_the_supervisor_removes_the_group_after_the_whole_tree(
    runtime: SubprocessRuntime, host_group_calls: list[str]
) -> None:
    spec = SpawnSpec([sys.executable, str(ESCAPEE)], grace_ms=5000)
    proc = await _started(runtime, spec, b"forked\n")
    group_dir = _group_dir(proc)
    await proc.wait()
    assert group_dir.is_dir(), "removed while the escapee still ran in it"
    await proc.aclose()
    supervisor = proc._supervised
    assert supervisor is not None
    assert supervisor.groups_removed
    assert not group_dir.exists()
    assert marked_processes(proc.tree_id) == []
    assert host_group_calls == []  # the host neither read nor removed the group


async def test_with_limits_the_host_reads_them_and_removes_the_group(
    runtime: SubprocessRuntime, host_group_calls: list[str]
) -> None:
    spec = SpawnSpec([sys.executable, str(ESCAPEE)], grace_ms=5000, limits=Limits(tasks=64))
    proc = await _started(runtime, spec, b"forked\n")
    group_dir = _group_dir(proc)
    await proc.aclose()
    supervisor = proc._supervised
    assert supervisor is not None
    assert not supervisor.groups_removed
    assert not group_dir.exists()
    assert "remove" in host_group_calls
    assert proc.limits_hit == ()


async def test_a_group_holding_a_stranger_is_not_reported_removed(
    runtime: SubprocessRuntime, host_group_calls: list[str]
) -> None:
    stranger = await _started(runtime, SpawnSpec([sys.executable, "-c", SLEEPER]), b"ready\n")
    proc = await _started(
        runtime, SpawnSpec([sys.executable, "-c", SLEEPER], grace_ms=5000), b"ready\n"
    )
    group_dir = _group_dir(proc)
    # A process that is no descendant of the supervisor, moved into the run's group: the
    # supervisor cannot remove a group that still holds it, so it must not claim it did.
    (group_dir / "cgroup.procs").write_text(str(stranger.pid))
    await proc.aclose()
    supervisor = proc._supervised
    assert supervisor is not None
    assert supervisor.empty
    assert not supervisor.groups_removed
    assert "populated" in host_group_calls  # so the host checked the group itself
    assert not group_dir.exists()
    # ... and ended the run the way the kernel layer does: the group's members killed.
    outcome = await asyncio.wait_for(stranger.wait(), 5.0)
    assert outcome.signal == "SIGKILL"
    await stranger.aclose()
