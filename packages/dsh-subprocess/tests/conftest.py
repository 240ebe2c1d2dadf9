from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import psutil
import pytest

from dsh.subprocess import TREE_MARKER_ENV, SubprocessRuntime, marked_processes


def _ours() -> list[int]:
    mine = []
    for pid in marked_processes():
        try:
            marker = psutil.Process(pid).environ().get(TREE_MARKER_ENV, "")
        except psutil.Error:
            continue
        if marker.startswith(f"{os.getpid()}:"):
            mine.append(pid)
    return mine


@pytest.fixture(autouse=True)
def _no_leaked_trees() -> Iterator[None]:
    yield
    assert _ours() == []


@pytest.fixture
async def runtime() -> AsyncIterator[SubprocessRuntime]:
    rt = SubprocessRuntime()
    yield rt
    await rt.aclose()
    assert rt.live == ()
