"""Per-run resource limits: what a caller asks the kernel layer to enforce on a whole tree."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["LIMIT_KEYS", "Limits", "parse_limits"]

LIMIT_KEYS = ("cpu", "memory", "tasks")
"""The keys of a ``limits`` table."""

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
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

    @property
    def requested(self) -> tuple[str, ...]:
        """The keys that carry a bound, sorted."""
        return tuple(key for key in LIMIT_KEYS if getattr(self, key) is not None)


def parse_limits(table: Mapping[str, object] | None, *, best_effort: bool = False) -> Limits | None:
    """``{"memory": "4G", "tasks": 512, "cpu": 1.5}`` as ``Limits``; None for no table or {}.

    Memory takes bytes or a size with a binary unit (``K``, ``M``, ``G``, ``T``; ``4G``,
    ``512MiB``). ``ValueError`` names the field (``limits.memory`` ...).
    """
    if table is None:
        return None
    if not isinstance(table, Mapping):
        raise ValueError("limits must be a table with memory, tasks and/or cpu")
    unknown = sorted(str(key) for key in table if key not in LIMIT_KEYS)
    if unknown:
        raise ValueError(f"limits.{unknown[0]} is not a known limit (memory, tasks, cpu)")
    if not table:
        return None
    return Limits(
        memory=_memory(table.get("memory")),
        tasks=_integer(table.get("tasks")),
        cpu=_cpu(table.get("cpu")),
        best_effort=best_effort,
    )


def _memory(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        match = _SIZE.fullmatch(value)
        if match:
            return int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    raise ValueError('limits.memory must be bytes or a size such as "512M" or "4G"')


def _integer(value: object) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValueError("limits.tasks must be an integer")


def _cpu(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise ValueError("limits.cpu must be a number of CPUs, such as 1.5")
