"""Owner-named run dirs: their name, the sweep of a dead owner's, and the private-home template.

A product provider's per-run directory (Claude Code's run dir, a ``private`` isolation home) is
named ``dsh-<tag>-<pid>-<start>-<random>`` in the system temporary directory; the run removes it
after whole-tree exit. A process killed outright (SIGKILL, a lost Ray worker, a host crash)
cannot, so the provider's first start in a process sweeps such dirs: ``<pid>`` and ``<start>``
(the owner's start time in clock ticks since boot, ``/proc/<pid>/stat`` field 22) name the owner
exactly, so a dir is removed only when no process with that pid and that start time exists. A
reused pid has another start time. Only directories of this user matching the whole pattern are
touched; symbolic links never are.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import secrets
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

__all__ = [
    "copy_home_template",
    "make_off_loop",
    "make_owned_dir",
    "new_owned_dir_path",
    "owned_dir_prefix",
    "remove_off_loop",
    "sweep_lost_dirs",
    "sweep_lost_dirs_once",
]

logger = logging.getLogger("dsh.subagent")

T = TypeVar("T")

_TAG = re.compile(r"[a-z][a-z0-9]*")
_swept: set[str] = set()
_swept_lock = threading.Lock()


def _check_tag(tag: str) -> str:
    if _TAG.fullmatch(tag) is None:
        raise ValueError("an owned-dir tag is lower-case letters and digits")
    return tag


def _start_ticks(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot, or ``None`` when there is none."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
        return int(data[data.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


_own_ticks: tuple[int, int | None] | None = None
"""(pid, its start ticks): a process's start time never changes, and a fork has another pid."""


def _own_start_ticks() -> tuple[int, int | None]:
    global _own_ticks
    pid = os.getpid()
    if _own_ticks is None or _own_ticks[0] != pid:
        _own_ticks = (pid, _start_ticks(pid))
    return _own_ticks


def owned_dir_prefix(tag: str) -> str:
    """``dsh-<tag>-<this pid>-<this process's start ticks>-``; without a start time (no
    ``/proc``) ``dsh-<tag>-<pid>-``, a name no sweep matches (it could not tell the owner)."""
    pid, ticks = _own_start_ticks()
    base = f"dsh-{_check_tag(tag)}-{pid}-"
    return base if ticks is None else f"{base}{ticks}-"


def make_owned_dir(tag: str) -> str:
    """A fresh ``0700`` directory named for this process (see the module docstring)."""
    return tempfile.mkdtemp(prefix=owned_dir_prefix(tag))


def new_owned_dir_path(tag: str) -> str:
    """A fresh, not yet existing path for an owned dir of this process: for a spawn that
    creates the dir itself (``dsh.subprocess.SpawnSpec.owned_files``). 64 random bits; the
    creator's ``mkdir`` fails rather than take over anything already there."""
    return str(Path(tempfile.gettempdir()) / (owned_dir_prefix(tag) + secrets.token_hex(8)))


def sweep_lost_dirs(tag: str, root: str | os.PathLike[str] | None = None) -> list[str]:
    """Remove the ``tag`` dirs under ``root`` (default: the temporary directory) whose owner is
    gone; return their names. A live owner's dir, another user's, a symlink or any other name is
    kept. Blocking (a directory listing, one ``/proc`` read per candidate)."""
    pattern = re.compile(rf"dsh-{_check_tag(tag)}-([0-9]+)-([0-9]+)-[a-z0-9_]+")
    base = Path(root if root is not None else tempfile.gettempdir())
    uid = os.getuid()
    removed = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return []
    for path in entries:
        match = pattern.fullmatch(path.name)
        if match is None:
            continue
        try:
            info = path.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
            continue
        if _start_ticks(int(match[1])) == int(match[2]):
            continue  # the owner runs: the dir is its run's
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed.append(path.name)
    return sorted(removed)


def _sweep_quietly(tag: str) -> None:
    try:
        removed = sweep_lost_dirs(tag)
    except Exception:
        logger.debug("sweeping lost %s dirs failed", tag, exc_info=True)
        return
    if removed:
        logger.debug("removed %d %s dir(s) of dead owners: %s", len(removed), tag, removed)


def sweep_lost_dirs_once(tag: str) -> None:
    """Start :func:`sweep_lost_dirs` once per process and tag, beside the first run's spawn (a
    daemon thread: a dead owner's files have nothing to do with the new run), and return."""
    with _swept_lock:
        if tag in _swept:
            return
        _swept.add(_check_tag(tag))
    threading.Thread(
        target=_sweep_quietly, args=(tag,), name=f"dsh-{tag}-sweep", daemon=True
    ).start()


def copy_home_template(template: str | None, dest: str | os.PathLike[str]) -> None:
    """Copy the contents of ``template`` into the existing directory ``dest``; never a link.

    Symbolic links inside the template are followed and their targets copied, so the private
    home holds no link back to the template (or anywhere else). ``None`` copies nothing.
    """
    if template is not None:
        shutil.copytree(template, dest, symlinks=False, dirs_exist_ok=True)


async def make_off_loop(make: Callable[[], T], dir_of: Callable[[T], str]) -> T:
    """``make()`` in a worker thread (creating files can block on the filesystem).

    Eight runs starting at once held the event loop for about 0.7 ms each here. A caller that
    gives up (cancelled, or its loop shut down while it waited) never leaks what ``make``
    created: the directory ``dir_of(result)`` is removed by whichever side sees the other gone,
    the worker thread when it finishes after the caller left, else the caller on its way out.
    Nothing depends on the loop still running when ``make`` finishes.
    """
    handoff = _Handoff(make, dir_of)
    making = asyncio.get_running_loop().run_in_executor(None, handoff.work)
    try:
        return await asyncio.shield(making)
    except BaseException:
        handoff.abandon()
        raise


class _Handoff(Generic[T]):
    """What a worker thread made, handed to a caller who may have left (see make_off_loop)."""

    def __init__(self, make: Callable[[], T], dir_of: Callable[[T], str]) -> None:
        self._make = make
        self._dir_of = dir_of
        self._lock = threading.Lock()
        self._abandoned = False
        self._made: list[T] = []

    def work(self) -> T:
        made = self._make()
        with self._lock:
            if not self._abandoned:
                self._made.append(made)
                return made
        self._remove(made)
        return made

    def abandon(self) -> None:
        with self._lock:
            self._abandoned = True
            made, self._made = self._made, []
        for item in made:  # finished before the caller left: one small dir, removed here
            self._remove(item)

    def _remove(self, made: T) -> None:
        with contextlib.suppress(OSError):
            shutil.rmtree(self._dir_of(made))


async def remove_off_loop(path: str) -> None:
    """Remove ``path`` (a tree; errors ignored) in a worker thread, even if the caller is cancelled.

    The removal is handed to the loop's default executor at once and shielded: a cancellation
    (a second cancel during a teardown, the loop's shutdown cancelling what is left) can no longer
    drop it while it waits for a free worker, which left a run's dir behind.
    """
    removal = asyncio.get_running_loop().run_in_executor(None, shutil.rmtree, path, True)
    await asyncio.shield(removal)
