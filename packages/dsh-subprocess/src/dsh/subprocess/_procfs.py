"""Process-table snapshots and guarded signalling.

On Linux a snapshot lists ``/proc`` and reads ``/proc/<pid>/stat`` only where the answer may have
changed: for a process it has not seen (a new pid, or a pid whose ``/proc`` inode differs: a reused
pid), for the pids the caller names (a tree's own members), for a process whose parent, group or
session leader pid has just appeared or vanished (so a reused pid never inherits another's
children or group), for threads-only processes, and for every process at least every
``_FULL_READ_S``. Everything else is the earlier reading: a process outside every tree cannot join
one. ``/proc/<pid>/environ`` is read once per new process (and again while it is young, in case it
execs) for the tree marker.

Liveness is by threads: a process whose main thread has exited while other threads run shows
``Z`` in ``/proc/<pid>/stat``, yet it runs, holds its resources and can be signalled. Such a
process counts as alive while any ``/proc/<pid>/task/<tid>/stat`` is not a zombie, and its marker
is read from a live thread (the main thread's ``environ`` reads empty once it has exited). Elsewhere
psutil supplies the same facts without markers. Every function here blocks briefly; async callers
run them in the package's worker threads (``_workers.offload``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass

__all__ = [
    "HAS_PIDFD",
    "TREE_MARKER_ENV",
    "ProcInfo",
    "Snapshot",
    "env_values",
    "is_own",
    "killpg",
    "owner_create_time",
    "read_info",
    "scan",
    "send_signal",
]

TREE_MARKER_ENV = "DSH_TREE_ID"
"""The environment variable that carries a spawn's tree marker."""

_IS_LINUX = sys.platform.startswith("linux")
HAS_PIDFD = _IS_LINUX and hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")
"""Whether this host can watch and signal a process through a pidfd (Linux 5.3+, Python 3.9+)."""
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if _IS_LINUX else 100
_MARKER_RECHECK_S = 2.0
_FULL_READ_S = 5.0
"""The longest a process's stat reading is reused: a bound on anything the rules above miss."""


@dataclass(frozen=True, slots=True)
class ProcInfo:
    """One process. ``start`` is an opaque start token (clock ticks on Linux)."""

    pid: int
    ppid: int
    pgrp: int
    sid: int
    start: float
    zombie: bool
    half_exited: bool = False
    """The main thread has exited while other threads run (Linux): alive, yet ``Z`` in stat."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One look at the process table."""

    taken: float
    procs: dict[int, ProcInfo]
    markers: dict[int, str]
    """pid -> tree marker, for live, non-zombie processes of this user only."""
    children: dict[int, list[int]]
    groups: dict[int, list[int]]
    """process-group id or session id -> pids in it."""
    fresh: frozenset[int] | None = None
    """The pids whose stat was read for this snapshot; None when every process was read."""

    def covers(self, pids: Collection[int]) -> bool:
        """True when every one of ``pids`` was read (or is absent) in this snapshot."""
        fresh = self.fresh
        return fresh is None or all(pid in fresh or pid not in self.procs for pid in pids)


def is_own(info: ProcInfo) -> bool:
    """True for the calling process and anything in its process group or session."""
    return info.pid == os.getpid() or info.pgrp == os.getpgrp() or info.sid == os.getsid(0)


def _read_small(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)


_DEAD_STATES = (b"Z", b"X", b"x")


def _state(data: bytes) -> bytes:
    return data[data.rindex(b")") + 2 :].split(None, 1)[0]


def live_thread(pid: int) -> int | None:
    """A thread of ``pid`` that is not a zombie, or None (Linux; blocking briefly)."""
    try:
        tids = [entry.name for entry in os.scandir(f"/proc/{pid}/task")]
    except OSError:
        return None
    for tid in tids:
        data = _read_small(f"/proc/{pid}/task/{tid}/stat")
        try:
            if data is not None and _state(data) not in _DEAD_STATES:
                return int(tid)
        except (ValueError, IndexError):
            continue
    return None


def _parse_stat(pid: int, data: bytes) -> ProcInfo | None:
    try:
        rest = data[data.rindex(b")") + 2 :].split()
        zombie = rest[0] in _DEAD_STATES
        half_exited = zombie and _IS_LINUX and live_thread(pid) is not None
        return ProcInfo(
            pid=pid,
            ppid=int(rest[1]),
            pgrp=int(rest[2]),
            sid=int(rest[3]),
            start=float(int(rest[19])),
            zombie=zombie and not half_exited,
            half_exited=half_exited,
        )
    except (ValueError, IndexError):
        return None


def _psutil_info(pid: int) -> ProcInfo | None:
    import psutil  # psutil serves elsewhere than Linux; imported there (7 ms of start-up)

    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            return ProcInfo(
                pid=pid,
                ppid=int(proc.ppid()),
                pgrp=os.getpgid(pid),
                sid=os.getsid(pid),
                start=float(proc.create_time()),
                zombie=proc.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD),
            )
    except (psutil.Error, OSError):
        return None


def read_info(pid: int) -> ProcInfo | None:
    """Facts about one process, or None when it does not exist."""
    if _IS_LINUX:
        data = _read_small(f"/proc/{pid}/stat")
        return None if data is None else _parse_stat(pid, data)
    return _psutil_info(pid)


def _read_marker_linux(info: ProcInfo, uid: int) -> tuple[bool, str | None]:
    """(readable, marker). Unreadable or other-user processes count as readable-without-marker."""
    readable, data = _read_environ_linux(info, uid)
    return readable, None if data is None else _env_value(data, TREE_MARKER_ENV)


def _read_environ_linux(info: ProcInfo, uid: int) -> tuple[bool, bytes | None]:
    """(readable, the environment block with a NUL in front), from a live thread when the main
    thread has exited (its ``environ`` reads empty then)."""
    pid = info.pid
    readable, data = _read_environ_block(f"/proc/{pid}/environ", uid)
    if data is None and info.half_exited:
        tid = live_thread(pid)
        if tid is not None and tid != pid:
            return _read_environ_block(f"/proc/{pid}/task/{tid}/environ", uid)
    return readable, data


def _read_environ_block(path: str, uid: int) -> tuple[bool, bytes | None]:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return True, None
    try:
        if os.fstat(fd).st_uid != uid:
            return True, None
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except OSError:
        return True, None
    finally:
        os.close(fd)
    if not chunks:
        return False, None
    return True, b"\0" + b"".join(chunks)


def _env_value(data: bytes, name: str) -> str | None:
    """The value of ``name`` in a NUL-prefixed environment block, or None."""
    needle = b"\0" + name.encode() + b"="
    at = data.find(needle)
    if at < 0:
        return None
    begin = at + len(needle)
    end = data.find(b"\0", begin)
    value = data[begin:] if end < 0 else data[begin:end]
    return value.decode("ascii", "replace")


def env_values(info: ProcInfo, names: Collection[str]) -> dict[str, str]:
    """The values of ``names`` set in the environment of ``info`` (this user's, alive; blocking
    briefly). A name that is unset, or a process that cannot be read, gives no entry."""
    uid = os.geteuid()
    if _IS_LINUX:
        data = _read_environ_linux(info, uid)[1]
        if data is None:
            return {}
        found = {name: _env_value(data, name) for name in names}
        return {name: value for name, value in found.items() if value is not None}
    import psutil

    try:
        proc = psutil.Process(info.pid)
        if proc.uids().effective != uid:
            return {}
        environ = proc.environ()
    except (psutil.Error, OSError):
        return {}
    return {name: environ[name] for name in names if name in environ}


def _read_marker_psutil(info: ProcInfo, uid: int) -> tuple[bool, str | None]:
    import psutil

    try:
        proc = psutil.Process(info.pid)
        if proc.uids().effective != uid:
            return True, None
        value = proc.environ().get(TREE_MARKER_ENV)
    except (psutil.Error, OSError):
        return True, None
    return True, value if isinstance(value, str) else None


@dataclass(slots=True)
class _MarkerEntry:
    start: float
    marker: str | None
    first_seen: float


class _MarkerCache:
    """Tree markers by (pid, start), re-read while a process is young (an exec may change it)."""

    def __init__(self) -> None:
        self.entries: dict[int, _MarkerEntry] = {}

    def lookup(self, procs: dict[int, ProcInfo], now: float) -> dict[int, str]:
        uid = os.geteuid()
        read = _read_marker_linux if _IS_LINUX else _read_marker_psutil
        fresh: dict[int, _MarkerEntry] = {}
        markers: dict[int, str] = {}
        for pid, info in procs.items():
            entry = self.entries.get(pid)
            if entry is not None and entry.start != info.start:
                entry = None
            if info.zombie or pid == 2 or info.ppid == 2:
                if entry is not None:
                    fresh[pid] = entry
                continue
            if entry is None or now - entry.first_seen < _MARKER_RECHECK_S:
                readable, marker = read(info, uid)
                if entry is None:
                    entry = _MarkerEntry(info.start, marker, now)
                elif readable:
                    entry.marker = marker
            fresh[pid] = entry
            if entry.marker is not None:
                markers[pid] = entry.marker
        self.entries = fresh
        return markers


class _StatCache:
    """The latest stat reading of every process, with the ``/proc`` inode it was read under."""

    def __init__(self) -> None:
        self.entries: dict[int, tuple[int, ProcInfo]] = {}
        self.full_at = -_FULL_READ_S

    def read(
        self, now: float, refresh: Collection[int], full: bool
    ) -> tuple[dict[int, ProcInfo], frozenset[int] | None]:
        with os.scandir("/proc") as listed:
            listing = {int(e.name): e.inode() for e in listed if e.name.isdigit()}
        old = self.entries
        full = (
            full or now - self.full_at >= _FULL_READ_S or len(set(listing.values())) < len(listing)
        )
        # A pid that appeared or vanished may be another's stale parent, group or session id.
        moved = {pid for pid, ino in listing.items() if old.get(pid, (None,))[0] != ino}
        moved.update(pid for pid in old if pid not in listing)
        procs: dict[int, ProcInfo] = {}
        entries: dict[int, tuple[int, ProcInfo]] = {}
        fresh: set[int] = set()
        for pid, ino in listing.items():
            known = old.get(pid)
            info = None if known is None or known[0] != ino else known[1]
            if (
                full
                or info is None
                or pid in refresh
                or info.half_exited
                or info.ppid in moved
                or info.pgrp in moved
                or info.sid in moved
            ):
                data = _read_small(f"/proc/{pid}/stat")
                info = None if data is None else _parse_stat(pid, data)
                fresh.add(pid)
            if info is not None:
                procs[pid] = info
                entries[pid] = (ino, info)
        self.entries = entries
        if full:
            self.full_at = now
            return procs, None
        return procs, frozenset(fresh)


_lock = threading.Lock()
_cache = _MarkerCache()
_stats = _StatCache()
_last: Snapshot | None = None


def _reset_after_fork() -> None:
    global _lock, _cache, _stats, _last
    _lock = threading.Lock()
    _cache = _MarkerCache()
    _stats = _StatCache()
    _last = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def _list_procs(
    now: float, refresh: Collection[int] = (), full: bool = True
) -> tuple[dict[int, ProcInfo], frozenset[int] | None]:
    if _IS_LINUX:
        return _stats.read(now, refresh, full)
    import psutil

    procs: dict[int, ProcInfo] = {}
    for pid in psutil.pids():
        info = _psutil_info(pid)
        if info is not None:
            procs[pid] = info
    return procs, None


def scan(max_age: float = 0.0, *, refresh: Collection[int] = (), full: bool = False) -> Snapshot:
    """A snapshot begun at most ``max_age`` seconds before this call (shared between callers).

    ``refresh`` names pids whose stat must be read for this snapshot (a tree's own members:
    they are the processes whose state matters). ``full`` reads every process, for callers that
    look at processes no tree knows (orphan reaping, leftover checks).

    Concurrent callers coalesce: one that waited for another's reading takes it when that reading
    began after its own call and read what it needs, so a burst of urgent callers costs at most
    two readings.
    """
    global _last
    asked = time.monotonic()
    with _lock:
        last = _last
        if (
            last is not None
            and last.taken >= asked - max_age
            and (last.fresh is None if full else last.covers(refresh))
        ):
            return last
        now = time.monotonic()
        procs, fresh = _list_procs(now, refresh, full)
        markers = _cache.lookup(procs, now)
        children: dict[int, list[int]] = {}
        groups: dict[int, list[int]] = {}
        for pid, info in procs.items():
            children.setdefault(info.ppid, []).append(pid)
            groups.setdefault(info.pgrp, []).append(pid)
            if info.sid != info.pgrp:
                groups.setdefault(info.sid, []).append(pid)
        _last = Snapshot(now, procs, markers, children, groups, fresh)
        return _last


def send_signal(info: ProcInfo, sig: int) -> bool:
    """Signal exactly the process ``info`` describes; never a reused pid, never our own."""
    if is_own(info) or info.pid <= 1:
        return False
    if HAS_PIDFD:
        try:
            fd = os.pidfd_open(info.pid)
        except OSError:
            return False
        try:
            current = read_info(info.pid)
            if current is None or current.start != info.start:
                return False
            signal.pidfd_send_signal(fd, sig)
            return True
        except OSError:
            return False
        finally:
            os.close(fd)
    current = read_info(info.pid)
    if current is None or current.start != info.start:
        return False
    try:
        os.kill(info.pid, sig)
    except OSError:
        return False
    return True


def killpg(pgid: int, sig: int) -> None:
    """Signal a process group, unless it is ours or our session's."""
    if pgid <= 1 or pgid == os.getpgrp() or pgid == os.getsid(0):
        return
    with contextlib.suppress(OSError):
        os.killpg(pgid, sig)


def _boot_time() -> float:
    """The system's boot time as psutil reads it on Linux, each time (``btime`` of
    ``/proc/stat`` follows the wall clock)."""
    with open("/proc/stat", "rb") as stat:  # noqa: PTH123 - read as psutil reads it
        line = next(line for line in stat if line.startswith(b"btime"))
    return float(line.split()[1])


def owner_create_time(pid: int) -> float | None:
    """The create time psutil reports for ``pid`` (seconds since the epoch), or None when it is
    gone or a zombie. On Linux it is psutil's own sum, read without psutil (start-up): the start
    ticks over ``SC_CLK_TCK``, plus the boot time, so markers written by either agree."""
    if _IS_LINUX:
        data = _read_small(f"/proc/{pid}/stat")
        try:
            if data is None or _state(data) in _DEAD_STATES:
                return None
            ticks = float(data[data.rindex(b")") + 2 :].split()[19])
        except (ValueError, IndexError):
            return None
        return ticks / _CLOCK_TICKS + _boot_time()
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return None
        return float(proc.create_time())
    except (psutil.Error, OSError):
        return None
