"""Best-effort CPU priority of a new tree: the child's nice value and its session's autogroup.

Every spawn starts a new session, and with Linux autogroups (on by default on many desktops and
VMs) each session is its own scheduling group with the weight of a whole session. Eight products
then hold eight shares of the CPU against the harness's one, and the harness's event loop waits
behind them. A positive nice on the child (inherited by its descendants) and on its autogroup
gives the harness back its share under contention; an idle CPU is still the product's to use.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

__all__ = ["lower_priority"]

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
        # A new session starts a new autogroup at nice 0; raising it needs no privilege.
        try:
            Path(f"/proc/{pid}/autogroup").write_text(str(nice), encoding="ascii")
        except OSError:  # also a kernel built without autogroups
            _log.debug("could not set the session's autogroup nice", exc_info=True)
