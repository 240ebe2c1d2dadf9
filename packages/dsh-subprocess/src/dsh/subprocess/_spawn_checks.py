"""``SpawnChecks``: this layer's checks before a product provider's spawn, as its hooks.

``dsh.subagent.kit.ProductProvider`` asks every product provider for ``limits_problem()`` and
``reap_orphans()`` before it spawns; the seam does not import this layer, so the answers are
written here, once: a provider lists ``SpawnChecks`` before ``ProductProvider`` among its bases
and keeps them (a product with checks of its own overrides them).
"""

from __future__ import annotations

from typing import Protocol

from dsh.subprocess._cgroup import limits_problem
from dsh.subprocess._limits import Limits
from dsh.subprocess._orphans import reap_orphans_once

__all__ = ["SpawnChecks"]


class _Configured(Protocol):
    @property
    def config(self) -> object: ...


class SpawnChecks:
    """``limits_problem()`` for the provider config's ``limits`` (``Limits.of(self.config)``) and
    ``reap_orphans()`` (``reap_orphans_once()``: the trees dead hosts left, once per process)."""

    def limits_problem(self: _Configured) -> str | None:
        """Why this machine cannot enforce the configured ``limits``, or ``None``."""
        return limits_problem(Limits.of(self.config))

    async def reap_orphans(self) -> None:
        """Reap the process trees dead hosts left (once per process, beside the first spawn)."""
        await reap_orphans_once()
