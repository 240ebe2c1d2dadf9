"""Product activity: the monotonic stamp a run moves on every message it reads from its product.

The seam's liveness signal (docs/liveness.md). A provider's run exposes ``last_activity``, the
``time.monotonic()`` of the last protocol message (a frame, a line) it read from the product, and
moves it on every one; the caller's stall limit compares it with the clock. The stamp is the
caller's to read, never a limit of the provider's own. A run without it (a third-party provider
written before the stamp) still works: the stall limit cannot apply to it, the wall-clock limit
still does.

A run may also expose ``first_activity``: the ``time.monotonic()`` at which the product first
reported model output for the task (Codex: the turn's first item other than the echoed prompt;
Claude Code: the first assistant message). It is a host-side timing fact
(``RunTimings.first_activity_s``), never a limit.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["ActivityStamp", "ReportsActivity", "first_activity", "last_activity"]


@runtime_checkable
class ReportsActivity(Protocol):
    """A run that reports product activity (both shipped providers' runs do)."""

    @property
    def last_activity(self) -> float | None:
        """``time.monotonic()`` of the last message read from the product; ``None``: unknown."""
        ...


class ActivityStamp:
    """One run's stamp: ``touch()`` on every message read, ``last`` for the reader.

    Starts at its creation (a run's spawn counts as activity). A plain attribute write per
    message and no timer, so the reading side decides what the stamp means.
    """

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last = time.monotonic()

    def touch(self) -> None:
        self.last = time.monotonic()


def last_activity(run: object) -> float | None:
    """The run's ``last_activity`` if it reports one (a finite float), else ``None``."""
    value = getattr(run, "last_activity", None)
    if isinstance(value, float | int) and not isinstance(value, bool):
        return float(value)
    return None


def first_activity(run: object) -> float | None:
    """The run's ``first_activity`` if it reports one (a finite float), else ``None``."""
    value = getattr(run, "first_activity", None)
    if isinstance(value, float | int) and not isinstance(value, bool):
        return float(value)
    return None
