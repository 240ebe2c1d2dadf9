"""The tree marker round-trips through its one builder and parser."""

from __future__ import annotations

import os
import sys

import psutil
import pytest

from dsh.subprocess import SpawnSpec, SubprocessRuntime
from dsh.subprocess._marker import format_marker, parse_marker
from dsh.subprocess._procfs import owner_create_time
from dsh.subprocess._spawn import new_marker


def test_marker_round_trips() -> None:
    assert parse_marker(format_marker("4242:1700000000.125", "ab12")) == (4242, 1700000000.125)


@pytest.mark.parametrize("value", ["", "1:2", "1:2:", "x:2:u", "1:y:u", "0:2:u", "1:2:u:v"])
def test_malformed_marker_is_none(value: str) -> None:
    assert parse_marker(value) is None


async def test_the_owner_time_is_psutils_to_the_marker_s_precision(
    runtime: SubprocessRuntime,
) -> None:
    """Markers carry the owner's create time, and orphan reaping compares it with the owner's
    time now: dsh reads it without psutil on Linux, and a marker written by a dsh that used
    psutil must still match."""
    child = await runtime.spawn(SpawnSpec([sys.executable, "-c", "import time; time.sleep(30)"]))
    try:
        for pid in (os.getpid(), os.getppid(), 1, child.pid):
            ours = owner_create_time(pid)
            assert ours is not None, pid
            assert f"{ours:.3f}" == f"{psutil.Process(pid).create_time():.3f}", pid
        mine = f"{owner_create_time(os.getpid()):.3f}"
        assert new_marker().split(":")[:2] == [str(os.getpid()), mine]
    finally:
        await child.aclose()
    assert owner_create_time(child.pid) is None  # gone
