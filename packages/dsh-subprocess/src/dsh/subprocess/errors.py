"""Errors raised by ``dsh.subprocess``.

The package has one error tree::

    SubprocessError            base of everything this package raises on purpose
    ├── SpawnError             the process could not be started: invalid argv, missing
    │                          executable, cwd missing or not a directory, runtime closed
    ├── TeardownError          a process tree could not be proven gone during cleanup
    └── LineTooLong            a line read by ``BoundedLines`` exceeded its bound (also a
                               ``ValueError``, what ``StreamReader.readline`` raises for one)

Messages name the failing part (``argv[0]``, ``cwd``, ...) and never contain environment values,
paths or product text; the raw cause is chained on ``__cause__``.
"""

from __future__ import annotations

__all__ = ["LineTooLong", "SpawnError", "SubprocessError", "TeardownError"]


class SubprocessError(Exception):
    """Base class of every error ``dsh.subprocess`` raises on purpose."""


class SpawnError(SubprocessError):
    """A process could not be started."""


class TeardownError(SubprocessError):
    """A process tree could not be proven gone."""


class LineTooLong(SubprocessError, ValueError):
    """A line exceeded the bound of the ``BoundedLines`` reading it (its text is never kept)."""
