"""The tree marker: built when a tree is spawned, parsed when orphans are looked for.

Format ``<owner pid>:<owner start time>:<uuid>``; the owner's start time tells a live owner
from a reused pid.
"""

from __future__ import annotations

__all__ = ["format_marker", "parse_marker"]


def format_marker(owner_identity: str, tree_uuid: str) -> str:
    """The marker for one tree: ``owner_identity`` is ``<pid>:<start time>``."""
    return f"{owner_identity}:{tree_uuid}"


def parse_marker(value: str) -> tuple[int, float] | None:
    """(owner pid, owner create time) from ``<pid>:<create time>:<uuid>``, or None if malformed."""
    parts = value.split(":")
    if len(parts) != 3 or not parts[2]:
        return None
    try:
        pid, created = int(parts[0]), float(parts[1])
    except ValueError:
        return None
    return (pid, created) if pid > 0 else None
