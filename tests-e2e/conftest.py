"""The leak guard for every cross-package test module.

After each module, no process may carry a dsh tree marker and no private temporary home
(``dsh-claude-*`` / ``dsh-codex-*`` or the product's own ``claude-*`` scratch directory) created
during the module may remain.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from dsh.subprocess import TREE_MARKER_ENV, marked_processes
from dsh.subprocess.testing import describe_processes

_TEMP_PATTERNS = ("dsh-claude-*", "dsh-codex-*", "claude-*")
_SETTLE_S = 3.0


def _temp_homes() -> set[Path]:
    root = Path(tempfile.gettempdir())
    return {
        path
        for pattern in _TEMP_PATTERNS
        for path in root.glob(pattern)
        if not _owned_by_another_live_process(path.name)
    }


def _owned_by_another_live_process(name: str) -> bool:
    """``dsh-claude-<pid>-…`` homes of another live process (another suite on the machine)."""
    parts = name.split("-")
    if len(parts) < 3 or parts[0] != "dsh" or not parts[2].isdigit():
        return False
    owner = int(parts[2])
    return owner != os.getpid() and psutil.pid_exists(owner)


def _ours_or_orphaned() -> list[int]:
    """Marked processes owned by this process, or by an owner that is gone (a ``dsh`` command
    the tests ran). Trees of other live owners (another suite on the machine) are theirs."""
    found = []
    for pid in marked_processes():
        try:
            marker = psutil.Process(pid).environ().get(TREE_MARKER_ENV, "")
        except psutil.Error:
            continue
        owner = marker.split(":", 1)[0]
        if owner == str(os.getpid()) or not owner.isdigit() or not psutil.pid_exists(int(owner)):
            found.append(pid)
    return found


def _wait_for_no_marked_processes() -> list[int]:
    # Trees are proven gone by the code under test; this only absorbs reaping latency.
    deadline = time.monotonic() + _SETTLE_S
    while True:
        live = _ours_or_orphaned()
        if not live or time.monotonic() > deadline:
            return live
        time.sleep(0.05)


@pytest.fixture(autouse=True, scope="module")
def leak_guard() -> Iterator[None]:
    before = _temp_homes()
    already = set(_ours_or_orphaned())
    yield
    leaked = sorted(set(_wait_for_no_marked_processes()) - already)
    new_homes = sorted(str(p.name) for p in _temp_homes() - before)
    assert not leaked, (
        f"processes carrying a dsh tree marker outlived the module: {describe_processes(leaked)}"
    )
    assert not new_homes, f"temporary homes outlived the module: {new_homes}"
