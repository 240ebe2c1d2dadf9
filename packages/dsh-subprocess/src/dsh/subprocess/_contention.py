"""``nice = "auto"``: a product runs at full priority while few run, and lower under contention.

A fixed positive nice costs a lone run a few percent on a small machine: every contended moment
goes to the harness's own work and to whatever else runs at nice 0. Under many concurrent runs a
high nice is what keeps the harness's event loop responsive. So the niceness of ``auto`` trees
follows how many of them are busy in this process, by tiers (on a 2-CPU machine: one busy tree
runs at 0, two to four at 10, five or more at 19). When the count enters a higher tier, every
busy auto tree (its threads and autogroups, see ``_priority``) is lowered to it. Nothing is
raised back when the contention ends: that would need a privilege, and a run that has been
lowered is one of many anyway.

A tree is busy from its spawn until it is gone, except while its owner says it is idle (a warm
process waiting for a delegation: ``ManagedProcess.set_busy(False)``). A tree spawned with
``SpawnSpec.busy = False`` (a warm process starting up) is idle from its spawn: its start-up
lowers no run in flight.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Protocol

from dsh.subprocess._workers import submit

__all__ = ["Contention", "contention", "default_tiers"]

_log = logging.getLogger("dsh.subprocess")


def default_tiers(cpus: int | None = None) -> tuple[tuple[int, int], ...]:
    """``(most busy trees, nice)`` pairs, lowest first; beyond the last pair's count, nice 19.

    Up to one busy tree per two CPUs runs at full priority; up to two per CPU at 10.
    """
    count = cpus if cpus is not None else (os.cpu_count() or 1)
    calm = max(1, count // 2)
    return ((calm, 0), (max(calm + 1, 2 * count), 10))


class _Lowerable(Protocol):
    def lower_priority(self, nice: int) -> None: ...


class Contention:
    """The busy auto trees of this process. Thread-safe; lowering runs in dsh's worker threads."""

    def __init__(self, tiers: tuple[tuple[int, int], ...] | None = None) -> None:
        self.tiers = tiers if tiers is not None else default_tiers()
        self._lock = threading.Lock()
        self._busy: dict[int, _Lowerable] = {}
        self._nice: dict[int, int] = {}
        """The nice value each tree known here was started at or lowered to."""

    @property
    def calm(self) -> int:
        """How many busy trees may run at full priority together."""
        return self.tiers[0][0]

    def nice_for(self, busy: int) -> int:
        """The nice value of every busy auto tree while ``busy`` of them are busy."""
        for most, nice in self.tiers:
            if busy <= most:
                return nice
        return 19

    def start_nice(self) -> int:
        """The nice value a new auto tree starts at (it will be one more busy tree)."""
        with self._lock:
            return self.nice_for(len(self._busy) + 1)

    def busy(self, tree: _Lowerable, *, started_at: int = 0) -> None:
        """``tree`` is busy now; lower every busy tree below the tier this count is in."""
        key = id(tree)
        with self._lock:
            self._busy[key] = tree
            self._nice[key] = max(self._nice.get(key, 0), started_at)
            target = self.nice_for(len(self._busy))
            pending = [t for k, t in self._busy.items() if self._nice[k] < target]
            for k in self._busy:
                self._nice[k] = max(self._nice[k], target)
        for pending_tree in pending:
            submit(self._lower, pending_tree, target)

    def started_idle(self, tree: _Lowerable, started_at: int) -> None:
        """``tree`` was spawned idle at ``started_at`` (``SpawnSpec.busy = False``): not counted."""
        with self._lock:
            self._nice[id(tree)] = started_at

    def idle(self, tree: _Lowerable) -> None:
        """``tree`` is idle: it no longer counts (a lowered tree stays lowered)."""
        with self._lock:
            self._busy.pop(id(tree), None)

    def forget(self, tree: _Lowerable) -> None:
        """``tree`` is gone."""
        with self._lock:
            self._busy.pop(id(tree), None)
            self._nice.pop(id(tree), None)

    def busy_count(self) -> int:
        with self._lock:
            return len(self._busy)

    @staticmethod
    def _lower(tree: _Lowerable, nice: int) -> None:
        try:
            tree.lower_priority(nice)
        except Exception:  # priority is a preference: never let it break a run
            _log.debug("could not lower a tree's priority", exc_info=True)


contention = Contention()
"""The process-wide instance every spawn with ``nice = "auto"`` uses."""
