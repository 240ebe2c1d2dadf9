"""Per-run resource limits: what a caller asks the kernel layer to enforce on a whole tree."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["LIMIT_KEYS", "Limits"]

LIMIT_KEYS = ("cpu", "memory", "tasks")
"""The keys of a ``limits`` table."""

_MIN_MEMORY = 4 << 20
_MAX_TASKS = 4_194_304
_MAX_CPU = 1024.0


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds for a whole tree: ``memory`` bytes, ``tasks`` (processes and threads), ``cpu``
    (CPUs' worth of time, e.g. 1.5). ``None`` leaves that resource unbounded.

    ``best_effort`` runs without the bounds where the machine cannot enforce them; otherwise such
    a spawn fails before anything starts.
    """

    memory: int | None = None
    tasks: int | None = None
    cpu: float | None = None
    best_effort: bool = False

    def __post_init__(self) -> None:
        memory: object = self.memory
        if memory is not None and (
            isinstance(memory, bool) or not isinstance(memory, int) or memory < _MIN_MEMORY
        ):
            raise ValueError("limits.memory must be at least 4M")
        tasks: object = self.tasks
        if tasks is not None and (
            isinstance(tasks, bool) or not isinstance(tasks, int) or not 1 <= tasks <= _MAX_TASKS
        ):
            raise ValueError(f"limits.tasks must be an integer from 1 to {_MAX_TASKS}")
        cpu: object = self.cpu
        if cpu is not None and (
            isinstance(cpu, bool)
            or not isinstance(cpu, int | float)
            or not math.isfinite(cpu)
            or not 0.01 <= cpu <= _MAX_CPU
        ):
            raise ValueError(f"limits.cpu must be a number of CPUs from 0.01 to {_MAX_CPU:g}")

    @classmethod
    def of(cls, config: object) -> Limits | None:
        """The limits of a provider config (its ``limits`` table, with ``memory``, ``tasks`` and
        ``cpu``, and ``limits_best_effort``); None when it sets none."""
        table = getattr(config, "limits", None)
        if table is None:
            return None
        limits = cls(
            memory=getattr(table, "memory", None),
            tasks=getattr(table, "tasks", None),
            cpu=getattr(table, "cpu", None),
            best_effort=bool(getattr(config, "limits_best_effort", False)),
        )
        return limits if limits.requested else None

    @property
    def requested(self) -> tuple[str, ...]:
        """The keys that carry a bound, sorted."""
        return tuple(key for key in LIMIT_KEYS if getattr(self, key) is not None)
