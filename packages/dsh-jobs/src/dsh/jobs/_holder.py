"""Which process holds a job's run, told by pid *and* start time, so a reused pid is not it.

A record names the process running its work; a reader in any process asks :func:`alive` to
learn whether that process still exists. Only ``/proc`` is read: nothing here signals or
spawns (``dsh.jobs`` spawns nothing; the tool layer reaps leftover trees).
"""

from __future__ import annotations

import os
from typing import NamedTuple

__all__ = ["Holder", "alive", "start_time", "this_process"]


class Holder(NamedTuple):
    """A process: its pid and its start time in clock ticks since boot (``/proc/<pid>/stat``)."""

    pid: int
    start: int

    def is_alive(self) -> bool:
        """Whether this process still runs (not a zombie, not a reused pid)."""
        return alive(self)


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:  # noqa: PTH123 - one small read
            raw = stat.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: fields resume after the last ")".
    _, _, rest = raw.rpartition(")")
    return rest.split()


def start_time(pid: int) -> int | None:
    """``pid``'s start time in clock ticks since boot, or ``None`` if it is gone or a zombie."""
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    try:
        return int(fields[19])  # field 22 of stat(5); fields[0] is field 3
    except ValueError:
        return None


_this: Holder | None = None


def this_process() -> Holder:
    """This process (recomputed after a fork)."""
    global _this
    pid = os.getpid()
    if _this is None or _this.pid != pid:
        _this = Holder(pid, start_time(pid) or 0)
    return _this


def alive(holder: Holder) -> bool:
    """Whether the process ``holder`` names still runs (not a zombie, not a reused pid)."""
    return start_time(holder.pid) == holder.start
