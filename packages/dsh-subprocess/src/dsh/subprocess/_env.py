"""The credential-scrubbed child environment."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

__all__ = ["DSH_ENV_PREFIX", "SENSITIVE_ENV_PATTERN", "build_child_env", "scrubbed_parent_env"]

SENSITIVE_ENV_PATTERN: re.Pattern[str] = re.compile(r"KEY|PASSWORD|SECRET|TOKEN", re.IGNORECASE)
"""Unanchored on purpose: ``MONKEY_X`` and ``KEYBOARD`` are removed too."""

DSH_ENV_PREFIX = "DSH_"
"""Every ambient name starting with this prefix, in any case, is removed."""


def _scrubbed(name: str) -> bool:
    return (
        SENSITIVE_ENV_PATTERN.search(name) is not None
        or name[: len(DSH_ENV_PREFIX)].upper() == DSH_ENV_PREFIX
    )


def scrubbed_parent_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A fresh copy of ``environ`` (default ``os.environ``) without sensitive or ``DSH_*`` names."""
    source: Mapping[str, str] = os.environ if environ is None else environ
    return {name: value for name, value in source.items() if not _scrubbed(name)}


def build_child_env(
    overlay: Mapping[str, str | None] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The scrubbed ambient environment with ``overlay`` merged after the scrub.

    A value of ``None`` in ``overlay`` is a tombstone that removes the name. Names passed here
    deliberately (``OPENAI_API_KEY``, ``DSH_X``) survive.
    """
    env = scrubbed_parent_env(environ)
    for name, value in (overlay or {}).items():
        if not isinstance(name, str):
            raise TypeError("env overlay names must be strings")
        if value is None:
            env.pop(name, None)
        elif isinstance(value, str):
            env[name] = value
        else:
            raise TypeError(f"env overlay value for {name!r} must be a string or None")
    return env
