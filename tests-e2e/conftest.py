"""The leak guard for every cross-package test module.

After each module, no process may carry a dsh tree marker and no private temporary home
(``dsh-claude-*`` / ``dsh-codex-*`` or the product's own ``claude-*`` scratch directory) created
during the module may remain.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.subprocess import marked_processes
from dsh.subprocess.testing import describe_processes

_TEMP_PATTERNS = ("dsh-claude-*", "dsh-codex-*", "claude-*")
_SETTLE_S = 3.0


def _temp_homes() -> set[Path]:
    root = Path(tempfile.gettempdir())
    return {path for pattern in _TEMP_PATTERNS for path in root.glob(pattern)}


def _wait_for_no_marked_processes() -> list[int]:
    # Trees are proven gone by the code under test; this only absorbs reaping latency.
    deadline = time.monotonic() + _SETTLE_S
    while True:
        live = marked_processes()
        if not live or time.monotonic() > deadline:
            return live
        time.sleep(0.05)


@pytest.fixture(autouse=True, scope="module")
def leak_guard() -> Iterator[None]:
    before = _temp_homes()
    already = set(marked_processes())
    yield
    leaked = sorted(set(_wait_for_no_marked_processes()) - already)
    new_homes = sorted(str(p.name) for p in _temp_homes() - before)
    assert not leaked, (
        f"processes carrying a dsh tree marker outlived the module: {describe_processes(leaked)}"
    )
    assert not new_homes, f"temporary homes outlived the module: {new_homes}"
