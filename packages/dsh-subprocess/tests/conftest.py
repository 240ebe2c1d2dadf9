from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from dsh.subprocess import SubprocessRuntime
from dsh.subprocess.pytest_plugin import dsh_leak_guard, dsh_session  # noqa: F401


@pytest.fixture
async def runtime() -> AsyncIterator[SubprocessRuntime]:
    rt = SubprocessRuntime()
    yield rt
    await rt.aclose()
    assert rt.live == ()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "linux_only: skipped on any platform but Linux")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``linux_only`` tests are skipped where the platform is not Linux."""
    if sys.platform.startswith("linux"):
        return
    skip = pytest.mark.skip(reason="Linux only")
    for item in items:
        if item.get_closest_marker("linux_only") is not None:
            item.add_marker(skip)


@pytest.fixture
def record_calls(monkeypatch: pytest.MonkeyPatch) -> Callable[..., list[str]]:
    """``record_calls(module, name, real, note)``: ``module.name`` becomes a wrapper that still
    calls ``real``; the list returned gets ``note(argument)`` of each call (unless ``None``)."""

    def patch(
        module: object, name: str, real: Callable[[Any], None], note: Callable[[Any], str | None]
    ) -> list[str]:
        seen: list[str] = []

        def recorded(argument: Any) -> None:
            noted = note(argument)
            if noted is not None:
                seen.append(noted)
            real(argument)

        monkeypatch.setattr(module, name, recorded)
        return seen

    return patch
