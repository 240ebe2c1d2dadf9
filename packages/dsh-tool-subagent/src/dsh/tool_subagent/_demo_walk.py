"""The demo's own count of the product processes it caused, wherever they were spawned.

With the local executor every product process is spawned by the demo process, so a marker walk
by owner pid finds them. On the Ray executor a background job's products are spawned by a Ray
worker process, whose pid the demo never learns (and should not trust dsh's records for). So the
demo tags its runs: each provider config gets :data:`RUN_ENV` = a fresh nonce in its ``env``
table (plain data, so it travels with a job like the rest of the config), and the walk below
reads ``/proc/<pid>/environ`` of every process of this user for the dsh tree marker *and* the
tag. It sees every process on this machine; processes on other machines are out of its reach.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dsh.subprocess import TREE_MARKER_ENV

__all__ = ["RUN_ENV", "new_run_tag", "tagged", "tagged_marked_processes"]

#: The env name carrying the demo's nonce into its product processes.
RUN_ENV = "DSH_DEMO_RUN"
_DEAD = frozenset({"Z", "X", "x"})


def new_run_tag() -> str:
    """A nonce naming one demo run (no secret: it only tells this run's processes apart)."""
    return secrets.token_hex(8)


def tagged(config: Mapping[str, Any], tag: str) -> dict[str, Any]:
    """``config`` with :data:`RUN_ENV` = ``tag`` added to its ``env`` table."""
    return {**config, "env": {**config.get("env", {}), RUN_ENV: tag}}


def _alive(stat: Path) -> bool:
    return stat.read_text("ascii", "replace").rsplit(")", 1)[1].split()[0] not in _DEAD


def _live_environ(proc: Path) -> bytes | None:
    """The environment of the process at ``proc`` if it is alive, read from a live thread when
    its main thread has exited while others run (a half-exited process is still a leftover)."""
    try:
        if _alive(proc / "stat"):
            return (proc / "environ").read_bytes()
        for thread in (proc / "task").iterdir():
            if _alive(thread / "stat"):
                return (thread / "environ").read_bytes()
    except (OSError, IndexError):
        return None
    return None


def tagged_marked_processes(tag: str) -> list[int]:
    """Live pids (this machine, this user, not this process) whose environment holds a dsh tree
    marker and :data:`RUN_ENV` = ``tag``. An own walk of ``/proc``; blocking briefly."""
    marker = (TREE_MARKER_ENV + "=").encode()
    wanted = f"{RUN_ENV}={tag}".encode()
    own = str(os.getpid())
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or proc.name == own:
            continue
        environ = _live_environ(proc)
        if environ is None:
            continue
        items = environ.split(b"\0")
        if wanted in items and any(item.startswith(marker) for item in items):
            found.append(int(proc.name))
    return sorted(found)
