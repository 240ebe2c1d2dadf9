"""Helpers for test suites that check no process tree outlived its test.

``spawner_processes`` lists dsh's own spawner and supervisors, to leave out of such checks.
``describe_processes`` turns the pids a leak guard found into lines that say what leaked (name,
state, parent, the start of its command line, its tree marker), so a rare leak in CI can be
traced from the failure message alone. Test-only: the lines may hold paths and arguments.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil

from dsh.subprocess._procfs import TREE_MARKER_ENV, live_thread
from dsh.subprocess._spawner import SPAWNER_SCRIPT_NAME

__all__ = ["describe_processes", "spawner_processes"]


def describe_processes(pids: list[int]) -> list[str]:
    """One line per pid; a pid that is gone by now says so.

    A process whose main thread has exited while others run is described from a live thread,
    and its state is shown as ``half-exited``.
    """
    lines = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                status = proc.status()
                if status == psutil.STATUS_ZOMBIE:
                    tid = live_thread(pid)
                    if tid is None:
                        lines.append(f"{pid} (gone)")
                        continue
                    status = "half-exited"
                    command, marker = _from_thread(pid, tid)
                else:
                    command = " ".join(proc.cmdline()[:4])[:160]
                    marker = proc.environ().get(TREE_MARKER_ENV, "?")
                lines.append(
                    f"{pid} {proc.name()} [{status}] ppid={proc.ppid()} "
                    f"pgid={os.getpgid(pid)} sid={os.getsid(pid)} marker={marker} cmd={command}"
                )
        except (psutil.Error, OSError):
            lines.append(f"{pid} (gone)")
    return lines


def _from_thread(pid: int, tid: int) -> tuple[str, str]:
    base = Path(f"/proc/{pid}/task/{tid}")
    argv = base.joinpath("cmdline").read_bytes().split(b"\0")
    command = " ".join(part.decode(errors="replace") for part in argv[:4])[:160]
    marker = "?"
    for item in base.joinpath("environ").read_bytes().split(b"\0"):
        name, _, value = item.partition(b"=")
        if name == TREE_MARKER_ENV.encode():
            marker = value.decode(errors="replace")
    return command, marker


def spawner_processes(owner_pid: int | None = None) -> list[int]:
    """Pids of dsh.subprocess's spawner and supervisors (of ``owner_pid``'s spawner if given).

    They are infrastructure, not tree members: a check for leftover children of a host that is
    still running should leave them out (they exit once the host does).
    """
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        argv = proc.info["cmdline"] or []
        ours = owner_pid is None or (argv[-1:] and argv[-1].split(":", 1)[0] == str(owner_pid))
        if len(argv) >= 3 and argv[-3].endswith(SPAWNER_SCRIPT_NAME) and ours:
            found.append(proc.pid)
    return sorted(found)
