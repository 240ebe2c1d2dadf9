"""The env rules both product provider configs apply (``env`` and ``inherit_env``).

A name with ``=`` or NUL, or a value with NUL, cannot reach ``execve``: caught only at spawn, it
would make every start fail with an opaque start-up line. The configs reject it when validated
instead, so the error names the field (pydantic's error location is the field; the message
names it too).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["check_env_names", "check_env_overlay"]


def _bad_name(name: str) -> bool:
    return not name or "=" in name or "\0" in name


def check_env_names(names: Iterable[str], field: str) -> None:
    """Raise ``ValueError`` naming ``field`` if a name is empty or holds ``=`` or NUL."""
    if any(_bad_name(name) for name in names):
        raise ValueError(f"{field} names must be non-empty and contain no '=' or NUL")


def check_env_overlay(env: Mapping[str, str], field: str = "env") -> None:
    """``check_env_names`` for the keys, and no NUL in any value."""
    check_env_names(env, field)
    if any("\0" in value for value in env.values()):
        raise ValueError(f"{field} values must not contain NUL")
