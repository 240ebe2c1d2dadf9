"""SpawnSpec.nice: the tree runs at the requested CPU priority (and its autogroup, on Linux)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from dsh.subprocess import SpawnSpec, SubprocessRuntime

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
    with pytest.raises(ValueError, match=r"^nice must be an integer from 0 to 19, or None$"):
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
