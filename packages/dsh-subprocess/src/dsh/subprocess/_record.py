"""An on-disk record of tree members that carry no marker, for ``reap_orphans()`` after a crash.

The last layer of containment. A member started with a cleaned environment (``env -i``) carries
no tree marker, so once its host, the host's spawner and its supervisor are all gone (each killed
by SIGKILL), nothing in the process table ties it to dsh any more. While the host lives, every
such member it observes is appended here as ``<pid> <start ticks>``; ``reap_orphans()`` in any
later process kills the ones still alive (same pid *and* start, so never a reused pid) for every
record whose host is dead, then removes the record.

One file per host process, ``<pid>-<create time>.members``, in a private directory:
``$XDG_RUNTIME_DIR/dsh``, else ``/tmp/dsh-<uid>`` whatever ``TMPDIR`` says (mode 0700, never
followed through a symlink; the directory stays once created). Writes happen only when an
unmarked member is first seen, which is rare: descendants inherit the marker unless they clean
their environment.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from dsh.subprocess._procfs import read_info

__all__ = ["MemberRecord", "owner_records", "record"]

_log = logging.getLogger("dsh.subprocess")
_SUFFIX = ".members"
_MAX_BYTES = 1 << 20
"""A record that grows past this is compacted to the lines whose process still runs."""


def _private_dir() -> Path | None:
    """The record directory, created if needed; None when it is not safely ours."""
    # A fixed place, not TMPDIR: a reaper whose TMPDIR differs from the dead host's must find it.
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "dsh" if runtime else Path("/tmp") / f"dsh-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        base.mkdir(mode=0o700)
    try:
        info = base.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        _log.debug("member record directory is not private; records are off")
        return None
    return base


class MemberRecord:
    """This host's record file (created on first use)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._path: Path | None = None
        self._owner: str | None = None
        self._written = False

    def add(self, owner: str, members: Iterable[tuple[int, float]]) -> None:
        """Append ``members`` (pid, start ticks); best effort, never raises."""
        lines = "".join(f"{pid} {int(start)}\n" for pid, start in members)
        if not lines:
            return
        with self._lock:
            try:
                path = self._file(owner)
                if path is None:
                    return
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
                fd = os.open(path, flags, 0o600)
                try:
                    if os.fstat(fd).st_size > _MAX_BYTES:
                        lines = _still_alive(path.read_text(encoding="ascii")) + lines
                        os.ftruncate(fd, 0)
                    os.write(fd, lines.encode("ascii"))
                    self._written = True
                finally:
                    os.close(fd)
            except OSError:
                _log.debug("could not write the member record", exc_info=True)

    def _file(self, owner: str) -> Path | None:
        if self._owner != owner:  # first use, or a forked child with an identity of its own
            directory = _private_dir()
            self._owner = owner
            self._path = None if directory is None else directory / _file_name(owner)
        return self._path

    def remove(self) -> None:
        """Forget the record (the host's trees are all gone)."""
        with self._lock:
            if self._written and self._path is not None:
                self._written = False
                with contextlib.suppress(OSError):
                    self._path.unlink()


def _still_alive(text: str) -> str:
    """The lines of ``text`` whose process still runs with the same start time."""
    kept = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            info = read_info(int(parts[0]))
            if info is not None and not info.zombie and int(info.start) == int(parts[1]):
                kept.append(line + "\n")
    return "".join(kept)


def _file_name(owner: str) -> str:
    pid, _, created = owner.partition(":")
    return f"{pid}-{created}{_SUFFIX}"


def owner_records() -> Iterator[tuple[Path, tuple[int, float], list[tuple[int, float]]]]:
    """Every record: (path, (owner pid, owner create time), members)."""
    directory = _private_dir()
    if directory is None:
        return
    for path in directory.glob(f"*{_SUFFIX}"):
        pid, _, created = path.name[: -len(_SUFFIX)].partition("-")
        try:
            owner = (int(pid), float(created))
            data = path.read_text(encoding="ascii", errors="replace")
        except (ValueError, OSError):
            continue
        members = []
        for line in data.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                members.append((int(parts[0]), float(parts[1])))
        yield path, owner, members


record = MemberRecord()
"""The record of this process."""
