"""Install checks a provider class reports to ``dsh doctor`` through an optional hook.

A provider class may define ``doctor() -> list[DoctorCheck]`` (a classmethod or staticmethod).
It must start no process and make no network call: it only looks at installed files and
metadata. The tool layer calls it through the entry point, so it never imports a product.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

__all__ = ["DoctorCheck", "payload_check", "version_check"]


class DoctorCheck(NamedTuple):
    """One row of ``dsh doctor``: what was checked, what was found, and whether it is healthy."""

    check: str
    value: str
    ok: bool


def version_check(label: str, dist: str) -> DoctorCheck:
    """The installed version of ``dist`` (a missing distribution is unhealthy)."""
    try:
        return DoctorCheck(label, metadata.version(dist), True)
    except metadata.PackageNotFoundError:
        return DoctorCheck(label, "not installed", False)


def payload_check(label: str, locate: Callable[[], str | os.PathLike[str]]) -> DoctorCheck:
    """Whether the executable ``locate()`` names exists and is executable.

    ``locate`` may raise (an uninstalled package, a wheel without its payload): that is reported
    as missing, never propagated, and the path itself never appears in the row.
    """
    try:
        path = Path(locate())
        ok = path.is_file() and os.access(path, os.X_OK)
    except Exception:
        ok = False
    return DoctorCheck(label, "present and executable" if ok else "missing or not executable", ok)
