"""The leak guard for every cross-package test module, and a job store of the session's own.

After each module, no process this session spawned may carry a dsh tree marker and no private
temporary home (``dsh-claude-*`` / ``dsh-codex-*`` of a session pid, or a ``claude-*`` scratch
directory that appeared during the module) may remain. Module scope with a short settle, since
the ``dsh`` commands these tests run are reaped a moment after they exit.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from dsh.subprocess.pytest_plugin import dsh_session, leak_guard_fixture  # noqa: F401

dsh_leak_guard = leak_guard_fixture(scope="module", settle_s=3.0)


@pytest.fixture(scope="session", autouse=True)
def private_state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The session's job store (``$XDG_STATE_HOME/dsh``) is its own, for every registry and
    every ``dsh`` command the tests start, never the user's."""
    before = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    yield
    if before is None:
        del os.environ["XDG_STATE_HOME"]
    else:
        os.environ["XDG_STATE_HOME"] = before
