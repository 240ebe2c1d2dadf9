"""Finding marked processes, and reaping trees whose owner died without cleaning up."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

from dsh.subprocess._procfs import (
    ProcInfo,
    Snapshot,
    is_own,
    owner_create_time,
    read_info,
    scan,
    send_signal,
)
from dsh.subprocess._workers import offload

__all__ = ["marked_processes", "parse_marker", "reap_orphans", "reap_orphans_once"]

_log = logging.getLogger("dsh.subprocess")
_reap_lock = threading.Lock()
_reaped = False

_OWNER_TIME_TOLERANCE_S = 1.0


def parse_marker(value: str) -> tuple[int, float] | None:
    """(owner pid, owner create time) from ``<pid>:<create time>:<uuid>``, or None if malformed."""
    parts = value.split(":")
    if len(parts) != 3 or not parts[2]:
        return None
    try:
        pid, created = int(parts[0]), float(parts[1])
    except ValueError:
        return None
    return (pid, created) if pid > 0 else None


def marked_processes(tree_id: str | None = None, *, owner_pid: int | None = None) -> list[int]:
    """Pids of live, non-zombie processes of this user carrying ``tree_id`` (any marker if None).

    ``owner_pid`` keeps only trees spawned by that process (the pid the marker names), so a test
    suite can check its own trees while other suites run on the same machine. The calling process
    itself is never listed. This scans the process table (blocking briefly).
    """
    snap = scan(0.0)
    own = os.getpid()
    found = []
    for pid, marker in snap.markers.items():
        if pid == own or (tree_id is not None and marker != tree_id):
            continue
        if owner_pid is not None:
            owner = parse_marker(marker)
            if owner is None or owner[0] != owner_pid:
                continue
        found.append(pid)
    return sorted(found)


def _owner_alive(owner: tuple[int, float], cache: dict[tuple[int, float], bool]) -> bool:
    alive = cache.get(owner)
    if alive is None:
        created = owner_create_time(owner[0])
        alive = created is not None and abs(created - owner[1]) <= _OWNER_TIME_TOLERANCE_S
        cache[owner] = alive
    return alive


def _orphan_members(snap: Snapshot, owners: dict[tuple[int, float], bool]) -> list[ProcInfo]:
    procs = snap.procs
    orphaned: set[int] = set()
    for pid, marker in snap.markers.items():
        owner = parse_marker(marker)
        if owner is not None and not _owner_alive(owner, owners):
            orphaned.add(pid)
    members = set(orphaned)
    for pid in orphaned:
        info = procs[pid]
        for group in {info.pgrp, info.sid}:
            if group > 1 and group not in (os.getpgrp(), os.getsid(0)):
                members.update(snap.groups.get(group, ()))
    stack = list(members)
    while stack:
        for child in snap.children.get(stack.pop(), ()):
            if child not in members:
                members.add(child)
                stack.append(child)
    return [procs[pid] for pid in members if not procs[pid].zombie and not is_own(procs[pid])]


def reap_orphans() -> list[int]:
    """SIGKILL the trees of processes whose marker names a dead (or pid-reused) owner.

    Returns the pids signalled, sorted. Blocks briefly (process-table scans, at most about a
    second of confirmation); async callers may use ``asyncio.to_thread(reap_orphans)``.
    """
    owners: dict[tuple[int, float], bool] = {}
    killed: dict[int, ProcInfo] = {}
    deadline = time.monotonic() + 1.0
    while True:
        fresh = [
            info
            for info in _orphan_members(scan(0.0), owners)
            if killed.get(info.pid) is None or killed[info.pid].start != info.start
        ]
        for info in fresh:
            killed[info.pid] = info
            send_signal(info, signal.SIGKILL)
        if not fresh or time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    while time.monotonic() < deadline and any(_alive(info) for info in killed.values()):
        time.sleep(0.01)
    return sorted(killed)


async def reap_orphans_once() -> None:
    """Run :func:`reap_orphans` once per process, off the event loop.

    Providers await this before their first spawn. Later calls return at once; concurrent first
    callers share one scan. A failing scan is logged at DEBUG and never blocks a spawn.
    """
    if not _reaped:
        await offload(_reap_once_sync)


def _reap_once_sync() -> None:
    global _reaped
    with _reap_lock:
        if _reaped:
            return
        try:
            reap_orphans()
        except Exception:
            _log.debug("reap_orphans failed", exc_info=True)
        _reaped = True


def _alive(info: ProcInfo) -> bool:
    current = read_info(info.pid)
    return current is not None and current.start == info.start and not current.zombie
