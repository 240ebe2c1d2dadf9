"""Finding marked processes, and reaping trees whose owner died without cleaning up."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Mapping

from dsh.subprocess._cgroup import sweep_dead_owners
from dsh.subprocess._marker import parse_marker
from dsh.subprocess._procfs import (
    _IS_LINUX,
    ProcInfo,
    Snapshot,
    env_values,
    is_own,
    owner_create_time,
    read_info,
    scan,
    send_signal,
)
from dsh.subprocess._record import owner_records
from dsh.subprocess._spawner import SPAWNER_SCRIPT_NAME
from dsh.subprocess._workers import submit

__all__ = ["marked_processes", "parse_marker", "reap_orphans", "reap_orphans_once"]

_log = logging.getLogger("dsh.subprocess")
_reap_lock = threading.Lock()
_reaped = False
_reap_started = False

_OWNER_TIME_TOLERANCE_S = 1.0


def marked_processes(
    tree_id: str | None = None,
    *,
    owner_pid: int | None = None,
    env: Mapping[str, str] | None = None,
) -> list[int]:
    """Pids of live, non-zombie processes of this user carrying ``tree_id`` (any marker if None).

    ``owner_pid`` keeps only trees spawned by that process (the pid the marker names), so a test
    suite can check its own trees while other suites run on the same machine. ``env`` keeps only
    processes whose environment also holds each of its ``name=value`` pairs (a tag a caller put
    in its spawns' env, whichever process spawned them). The calling process itself is never
    listed. This scans the process table (blocking briefly).
    """
    snap = scan(0.0, full=True)
    own = os.getpid()
    found = []
    for pid, marker in snap.markers.items():
        if pid == own or (tree_id is not None and marker != tree_id):
            continue
        if owner_pid is not None:
            owner = parse_marker(marker)
            if owner is None or owner[0] != owner_pid:
                continue
        if env and env_values(snap.procs[pid], env) != dict(env):
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


def _spawner_owner(pid: int) -> tuple[int, float] | None:
    """The owner a spawner or supervisor process names in its argv, or None for any other."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:  # noqa: PTH123 - one small read
            argv = handle.read(4096).split(b"\0")
    except OSError:
        return None
    if len(argv) < 4 or not argv[-4].endswith(SPAWNER_SCRIPT_NAME.encode()):
        return None
    return parse_marker(argv[-2].decode("ascii", "replace") + ":spawner")


def _orphan_members(
    snap: Snapshot,
    owners: dict[tuple[int, float], bool],
    recorded: set[tuple[int, float]],
) -> list[ProcInfo]:
    """Everything to kill: trees of dead owners by marker, by spawner, or by member record."""
    procs = snap.procs
    orphaned: set[int] = set()
    for pid, marker in snap.markers.items():
        owner = parse_marker(marker)
        if owner is not None and not _owner_alive(owner, owners):
            orphaned.add(pid)
    for pid, info in procs.items():
        if (pid, info.start) in recorded:
            orphaned.add(pid)
        elif _IS_LINUX and not info.zombie and not is_own(info):
            owner = _spawner_owner(pid)
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

    Also the trees below a dead owner's spawner and supervisors (they survive only if something
    stopped them from cleaning up), and every member a dead owner recorded without a marker
    (``_record``), matched by pid and start time. Under the kernel layer it also empties and
    removes the cgroups of dead hosts (their pids are not in the returned list).

    Returns the pids signalled, sorted. Blocks briefly (process-table scans, at most about a
    second of confirmation); async callers may use ``asyncio.to_thread(reap_orphans)``.
    """
    owners: dict[tuple[int, float], bool] = {}
    killed: dict[int, ProcInfo] = {}
    recorded: set[tuple[int, float]] = set()
    finished_records = []
    for path, owner, members in owner_records():
        if not _owner_alive(owner, owners):
            recorded.update(members)
            finished_records.append(path)
    deadline = time.monotonic() + 1.0
    while True:
        fresh = [
            info
            for info in _orphan_members(scan(0.0, full=True), owners, recorded)
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
    for path in finished_records:
        with contextlib.suppress(OSError):
            path.unlink()
    try:
        sweep_dead_owners()  # the kernel layer's groups of dead hosts, and what is left in them
    except OSError:
        _log.debug("sweeping dead hosts' cgroups failed", exc_info=True)
    return sorted(killed)


async def reap_orphans_once() -> None:
    """Start :func:`reap_orphans` once per process on a worker thread, and return at once.

    Providers call this before their first spawn. The reap runs beside that spawn instead of
    before it: a dead owner's leftovers have nothing to do with the new run, and the scan (5 to
    10 ms, reading every process's environment once) was on the critical path of every one-run
    process such as ``dsh run``. A failing scan is logged at DEBUG and never blocks a spawn.
    """
    global _reap_started
    if not _reap_started:
        _reap_started = True
        submit(_reap_once_sync)


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
