"""Install checks a provider class reports to ``dsh doctor`` through an optional hook.

A provider may define ``doctor() -> list[DoctorCheck]`` (a method, classmethod or staticmethod).
``dsh doctor`` calls it on each configured instance (a method sees that instance's config), and
on the class when no instance can be built. It must start no process and make no network call:
it only looks at installed files, metadata and the environment's names. The tool layer calls it
through the entry point, so it never imports a product.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

__all__ = ["DoctorCheck", "credential_checks", "payload_check", "version_check"]


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


def credential_checks(names: Sequence[str], login_files: Sequence[Path]) -> list[DoctorCheck]:
    """Rows for the credential sources a product will see: variable names and login files.

    Only names and "exists / absent" are shown, never a value or a path. The rows are always
    healthy: a product may still authenticate through its own config (a provider's ``env_key``
    given in ``env``), which dsh cannot judge without starting it.
    """
    found = any(path.is_file() for path in login_files)
    return [
        DoctorCheck("credential variables", ", ".join(names) if names else "none", True),
        DoctorCheck("login file", "exists" if found else "absent", True),
    ]
