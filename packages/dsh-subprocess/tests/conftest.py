from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest

from dsh.subprocess import SubprocessRuntime, marked_processes


def _ours() -> list[int]:
    return marked_processes(owner_pid=os.getpid())


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
