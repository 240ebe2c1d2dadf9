"""Helpers for test suites that check no process tree outlived its test.

``describe_processes`` turns the pids a leak guard found into lines that say what leaked (name,
state, parent, the start of its command line, its tree marker), so a rare leak in CI can be
traced from the failure message alone. Test-only: the lines may hold paths and arguments.
"""

from __future__ import annotations

import os

import psutil

from dsh.subprocess._procfs import TREE_MARKER_ENV

__all__ = ["describe_processes"]


def describe_processes(pids: list[int]) -> list[str]:
    """One line per pid; a pid that is gone by now says so."""
    lines = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                command = " ".join(proc.cmdline()[:4])[:160]
                marker = proc.environ().get(TREE_MARKER_ENV, "?")
                lines.append(
                    f"{pid} {proc.name()} [{proc.status()}] ppid={proc.ppid()} "
                    f"pgid={os.getpgid(pid)} sid={os.getsid(pid)} marker={marker} cmd={command}"
                )
        except (psutil.Error, OSError):
            lines.append(f"{pid} (gone)")
    return lines
