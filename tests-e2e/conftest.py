"""The leak guard for every cross-package test module.

After each module, no process this session spawned may carry a dsh tree marker and no private
temporary home (``dsh-claude-*`` / ``dsh-codex-*`` of a session pid, or a ``claude-*`` scratch
directory that appeared during the module) may remain. Module scope with a short settle, since
the ``dsh`` commands these tests run are reaped a moment after they exit.
"""

from __future__ import annotations

from dsh.subprocess.pytest_plugin import dsh_session, leak_guard_fixture  # noqa: F401

dsh_leak_guard = leak_guard_fixture(scope="module", settle_s=3.0)
