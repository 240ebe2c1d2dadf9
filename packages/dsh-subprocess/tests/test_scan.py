"""Process-table snapshots: fresh enough for every caller, and shared by concurrent callers."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dsh.subprocess import _procfs


def test_a_snapshot_never_begins_before_the_call() -> None:
    for _ in range(5):
        asked = time.monotonic()
        assert _procfs.scan(0.0).taken >= asked


def test_max_age_reuses_a_recent_snapshot() -> None:
    first = _procfs.scan(0.0)
    assert _procfs.scan(60.0) is first


def test_concurrent_urgent_callers_share_readings(monkeypatch: pytest.MonkeyPatch) -> None:
    real = _procfs._list_procs
    inside = threading.Event()
    release = threading.Event()
    readings: list[float] = []

    def held(*args: Any) -> Any:
        readings.append(time.monotonic())
        inside.set()
        release.wait(10)
        return real(*args)

    monkeypatch.setattr(_procfs, "_list_procs", held)
    first = threading.Thread(target=_procfs.scan, args=(0.0,))
    first.start()
    assert inside.wait(10)
    # Six more callers arrive while the first reading is in progress.
    results: list[_procfs.Snapshot] = []
    waiting = [threading.Thread(target=lambda: results.append(_procfs.scan(0.0))) for _ in range(6)]
    for thread in waiting:
        thread.start()
    time.sleep(0.05)
    release.set()
    for thread in [first, *waiting]:
        thread.join(10)
    assert len(results) == 6
    assert len(readings) == 2  # the first reading, then one more shared by all six
    assert len({id(snap) for snap in results}) == 1


# ---- incremental readings: what is re-read, and what may be reused ---------------------------

_SLEEP = shutil.which("sleep") or "/bin/sleep"
_SH = shutil.which("sh") or "/bin/sh"


def _spawn_raw(argv: list[str], stdin: int | None = None, stdout: int | None = None) -> int:
    """An untracked child (no dsh tree): what any other process on the machine looks like."""
    actions = []
    if stdin is not None:
        actions.append((os.POSIX_SPAWN_DUP2, stdin, 0))
    if stdout is not None:
        actions.append((os.POSIX_SPAWN_DUP2, stdout, 1))
    return os.posix_spawn(argv[0], argv, dict(os.environ), file_actions=actions)


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _stat_state(pid: int) -> str:
    data = Path(f"/proc/{pid}/stat").read_bytes()
    return data[data.rindex(b")") + 2 :].split()[0].decode()


def _kill_and_reap(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def test_an_incremental_reading_reuses_long_lived_processes() -> None:
    _procfs.scan(0.0, full=True)
    snap = _procfs.scan(0.0)
    assert snap.fresh is not None
    assert 1 in snap.procs
    assert 1 not in snap.fresh  # init did not change: its stat was not read again
    assert len(snap.fresh) < len(snap.procs)


def test_full_and_refresh_read_what_they_name() -> None:
    pid = _spawn_raw([_SLEEP, "30"])
    try:
        _procfs.scan(0.0, full=True)
        os.kill(pid, signal.SIGKILL)  # not reaped: it stays a zombie under the same pid
        _until(lambda: _stat_state(pid) == "Z", "the child never became a zombie")
        stale = _procfs.scan(0.0)
        assert stale.fresh is not None
        assert pid not in stale.fresh
        refreshed = _procfs.scan(0.0, refresh={pid})
        assert refreshed.fresh is not None
        assert pid in refreshed.fresh
        assert refreshed.procs[pid].zombie
        full = _procfs.scan(0.0, full=True)
        assert full.fresh is None
        assert full.procs[pid].zombie
    finally:
        _kill_and_reap(pid)


def test_a_recent_snapshot_is_not_reused_for_a_pid_it_did_not_read() -> None:
    pid = _spawn_raw([_SLEEP, "30"])
    try:
        first = _procfs.scan(0.0, full=True)
        second = _procfs.scan(60.0, refresh={pid})
        assert second is first  # a full reading read everything
        incremental = _procfs.scan(0.0)
        assert _procfs.scan(60.0) is incremental
        again = _procfs.scan(60.0, refresh={pid})
        assert again is not incremental
        assert again.fresh is not None
        assert pid in again.fresh
    finally:
        _kill_and_reap(pid)


def test_a_reading_older_than_the_full_interval_reads_everything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _procfs.scan(0.0, full=True)
    monkeypatch.setattr(_procfs, "_FULL_READ_S", 0.0)
    assert _procfs.scan(0.0).fresh is None


def test_children_of_a_vanished_parent_are_read_again() -> None:
    read_end, write_end = os.pipe()
    in_read, in_write = os.pipe()
    shell = _spawn_raw([_SH, "-c", f"{_SLEEP} 30 & echo $!; read line"], in_read, write_end)
    os.close(write_end)
    os.close(in_read)
    orphan = 0
    try:
        with os.fdopen(read_end, "rb") as out:
            orphan = int(out.readline())
        _until(lambda: orphan in _procfs.scan(0.0, full=True).procs, "no orphan-to-be")
        assert _procfs.scan(0.0, full=True).procs[orphan].ppid == shell
        os.close(in_write)  # the shell exits; its child is reparented
        os.waitpid(shell, 0)
        snap = _procfs.scan(0.0)
        assert snap.fresh is not None
        assert orphan in snap.fresh
        assert snap.procs[orphan].ppid != shell
    finally:
        with contextlib.suppress(OSError):
            os.close(in_write)
        if orphan:
            with contextlib.suppress(ProcessLookupError):
                os.kill(orphan, signal.SIGKILL)
        _kill_and_reap(shell)


def _take_pid(pid: int) -> int:
    """Spawn a sleeper that gets ``pid`` again (root only: ns_last_pid); 0 when it cannot."""
    for _ in range(20):
        try:
            Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
        except OSError:
            return 0
        child = _spawn_raw([_SLEEP, "30"])
        if child == pid:
            return child
        _kill_and_reap(child)  # another process took the pid first: try again
    return 0


def test_a_reused_pid_is_read_again() -> None:
    first = _spawn_raw([_SLEEP, "30"])
    try:
        before = _procfs.scan(0.0, full=True).procs[first]
    finally:
        _kill_and_reap(first)
    time.sleep(0.05)  # start tokens are clock ticks: a later tick tells the two apart
    again = _take_pid(first)  # no reading in between: the cache still holds the old process
    if not again:
        # Not root: the pid cannot be chosen. Check the identity the cache relies on instead:
        # each process has its own /proc inode, and it stays the same while the process lives.
        with os.scandir("/proc") as entries:
            inodes = [e.inode() for e in entries if e.name.isdigit()]
        assert len(set(inodes)) == len(inodes)
        return
    try:
        snap = _procfs.scan(0.0)
        assert snap.fresh is not None
        assert again in snap.fresh
        assert snap.procs[again].start != before.start
    finally:
        _kill_and_reap(again)
