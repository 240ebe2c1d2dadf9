"""Best-effort CPU priority of a tree: the child's nice value and its session's autogroup.

Every spawn starts a new session, and with Linux autogroups (on by default on many desktops and
VMs) each session is its own scheduling group with the weight of a whole session. Eight products
then hold eight shares of the CPU against the harness's one, and the harness's event loop waits
behind them. A positive nice on the child (inherited by its descendants) and on its autogroup
gives the harness back its share under contention; an idle CPU is still the product's to use.
A running tree can be lowered later too (``lower_running``): on Linux a nice value belongs to a
thread, so every thread of every member is set.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path

__all__ = ["lower_priority", "lower_running"]

_log = logging.getLogger("dsh.subprocess")

_IS_LINUX = sys.platform.startswith("linux")


def lower_priority(pid: int, nice: int) -> None:
    """Run ``pid`` (a child not yet reaped) at ``nice``, never above its current priority.

    Called right after ``exec``: threads and children the product starts later inherit the value.
    Failures are logged at DEBUG and ignored; priority is a preference, not a guarantee.
    """
    try:
        current = os.getpriority(os.PRIO_PROCESS, pid)
        if nice > current:
            os.setpriority(os.PRIO_PROCESS, pid, nice)
    except OSError:
        _log.debug("could not lower the child's nice value", exc_info=True)
    if _IS_LINUX and nice > 0:
        _lower_autogroup(pid, nice)


def lower_running(pids: Iterable[int], nice: int) -> int:
    """Lower every thread of the running processes ``pids`` to ``nice`` (never raising one), and
    their autogroups. Returns how many threads were changed; a process that is gone is skipped."""
    changed = 0
    for pid in pids:
        try:
            threads = (
                [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]
                if _IS_LINUX
                else [pid]
            )
        except OSError:
            continue
        for tid in threads:
            try:
                if nice > os.getpriority(os.PRIO_PROCESS, tid):
                    os.setpriority(os.PRIO_PROCESS, tid, nice)
                    changed += 1
            except OSError:
                continue  # gone meanwhile
        if _IS_LINUX and nice > 0:
            _lower_autogroup(pid, nice)
    return changed


def _lower_autogroup(pid: int, nice: int) -> None:
    # A new session starts a new autogroup at nice 0; raising it needs no privilege. Lowering it
    # back would, so a value already above ``nice`` is kept.
    path = Path(f"/proc/{pid}/autogroup")
    try:
        current = int(path.read_text(encoding="ascii").rsplit("nice", 1)[1])
        if nice > current:
            path.write_text(str(nice), encoding="ascii")
    except (OSError, ValueError, IndexError):  # also a kernel built without autogroups
        _log.debug("could not set the session's autogroup nice", exc_info=True)
