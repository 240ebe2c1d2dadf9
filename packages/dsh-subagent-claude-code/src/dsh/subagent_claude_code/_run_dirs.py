"""Run dirs: their name, and the sweep of the ones a dead owner left behind.

Each Claude Code run owns a fresh directory ``dsh-claude-<pid>-<start>-<random>`` in the
system temporary directory (its private ``TMPDIR`` and the Bash-tool env script); the run removes
it after whole-tree exit. A process killed outright (SIGKILL, a lost Ray worker, a host crash)
cannot, so the provider's first start in a process sweeps such dirs: ``<pid>`` and ``<start>``
(the owner's start time in clock ticks since boot, ``/proc/<pid>/stat`` field 22) name the owner
exactly, so a dir is removed only when no process with that pid and that start time exists. A
reused pid has another start time. Only directories of this user matching the whole pattern
are touched; symbolic links never are.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import tempfile
import threading
from pathlib import Path

__all__ = ["run_dir_prefix", "sweep_lost_run_dirs", "sweep_lost_run_dirs_once"]

logger = logging.getLogger("dsh.subagent_claude_code")

_NAME = re.compile(r"dsh-claude-([0-9]+)-([0-9]+)-[a-z0-9_]+")
_swept = False
_swept_lock = threading.Lock()


def _start_ticks(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot, or ``None`` when there is none."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
        return int(data[data.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def run_dir_prefix() -> str:
    """``dsh-claude-<this pid>-<this process's start ticks>-``; without a start time (no
    ``/proc``) ``dsh-claude-<pid>-``, a name no sweep matches (it could not tell the owner)."""
    pid = os.getpid()
    ticks = _start_ticks(pid)
    return f"dsh-claude-{pid}-" if ticks is None else f"dsh-claude-{pid}-{ticks}-"


def sweep_lost_run_dirs(root: str | os.PathLike[str] | None = None) -> list[str]:
    """Remove the run dirs under ``root`` (default: the temporary directory) whose owner is gone;
    return their names. A live owner's dir, another user's, a symlink or any other name is kept.
    Blocking (a directory listing, one ``/proc`` read per candidate)."""
    base = Path(root if root is not None else tempfile.gettempdir())
    uid = os.getuid()
    removed = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return []
    for path in entries:
        match = _NAME.fullmatch(path.name)
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


def _sweep_quietly() -> None:
    try:
        removed = sweep_lost_run_dirs()
    except Exception:
        logger.debug("sweeping lost run dirs failed", exc_info=True)
        return
    if removed:
        logger.debug("removed %d run dir(s) of dead owners: %s", len(removed), removed)


def sweep_lost_run_dirs_once() -> None:
    """Start :func:`sweep_lost_run_dirs` once per process, beside the first run's spawn (a
    daemon thread: a dead owner's files have nothing to do with the new run), and return."""
    global _swept
    with _swept_lock:
        if _swept:
            return
        _swept = True
    threading.Thread(target=_sweep_quietly, name="dsh-claude-sweep", daemon=True).start()
