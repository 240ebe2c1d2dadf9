"""The dsh leak guard as pytest fixtures: nothing a test session spawned outlives its scope.

Import the fixtures into a ``conftest.py`` (``pytest_plugins`` is only honoured in a rootdir
conftest, and each package's tests also run alone)::

    from dsh.subprocess.pytest_plugin import dsh_leak_guard, dsh_session  # noqa: F401

``dsh_leak_guard`` is autouse and checks after every test. A folder whose tests run ``dsh``
commands whose trees take a moment to be reaped may override it with a module-scoped one built
by :func:`leak_guard_fixture`. Only the session's own trees and temp dirs count; see
:class:`dsh.subprocess.testing.SessionProcesses`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal

import pytest

from dsh.subprocess.testing import SessionProcesses, check_no_leaks

__all__ = ["dsh_leak_guard", "dsh_session", "leak_guard_fixture"]


@pytest.fixture(scope="session")
def dsh_session() -> Iterator[SessionProcesses]:
    """The processes of this test session, sampled while it runs."""
    session = SessionProcesses()
    yield session
    session.close()


def leak_guard_fixture(
    scope: Literal["function", "module"] = "function", settle_s: float = 0.0
) -> Callable[..., Any]:
    """An autouse fixture that fails its ``scope`` if the session left a tree or temp dir."""

    @pytest.fixture(autouse=True, scope=scope, name="dsh_leak_guard")
    def guard(dsh_session: SessionProcesses) -> Iterator[None]:
        before_dirs = dsh_session.temp_dirs()
        before_unowned = dsh_session.unowned_snapshot()
        already = dsh_session.marked()
        yield
        check_no_leaks(
            dsh_session,
            before_dirs=before_dirs,
            before_unowned=before_unowned,
            already=already,
            settle_s=settle_s,
            what="test" if scope == "function" else "module",
        )

    return guard


dsh_leak_guard = leak_guard_fixture()
