from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from dsh.subprocess import SubprocessRuntime
from dsh.subprocess.pytest_plugin import dsh_leak_guard, dsh_session  # noqa: F401


@pytest.fixture
async def runtime() -> AsyncIterator[SubprocessRuntime]:
    rt = SubprocessRuntime()
    yield rt
    await rt.aclose()
    assert rt.live == ()
