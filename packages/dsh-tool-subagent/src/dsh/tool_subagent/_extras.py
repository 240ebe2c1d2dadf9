"""The ``ImportError`` of an adapter whose framework is not installed: it names the extra."""

from __future__ import annotations

import importlib.util

__all__ = ["framework_missing", "missing_extra_text"]


def missing_extra_text(framework: str, extra: str) -> str:
    """``<framework> is not installed; install it with: pip install "dsh-tool-subagent[extra]"``."""
    return (
        f"the dsh {framework} adapter needs {framework}, which is not installed;"
        f' install it with: pip install "dsh-tool-subagent[{extra}]"'
    )


def framework_missing(exc: ImportError, modules: tuple[str, ...]) -> bool:
    """Whether ``exc`` comes from a framework module that is absent (not a broken install)."""
    top = (exc.name or "").partition(".")[0]
    if isinstance(exc, ModuleNotFoundError) and top in modules:
        return True
    for module in modules:
        try:
            if importlib.util.find_spec(module) is None:
                return True
        except (ImportError, ValueError):
            return True
    return False
