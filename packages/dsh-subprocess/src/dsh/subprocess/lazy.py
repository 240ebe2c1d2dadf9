"""Package attributes read when first asked for (PEP 562), shared by the dsh packages.

A package's ``__version__`` comes from its installed metadata, and reading it imports
:mod:`importlib.metadata` and the ``email`` parser: about 15 ms that ``dsh run`` would pay before
the product starts (docs/performance.md, "Start-up"). Names whose modules are dear to import (a
product's SDK) are imported when a caller first asks for them, too.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["package_getattr"]


def _version(distribution: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:  # imported from a source tree that is not installed
        return "0+unknown"


def package_getattr(
    package: str, *, distribution: str | None = None, lazy: Mapping[str, str] | None = None
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``__version__`` of ``distribution`` and each
    name of ``lazy`` (name -> the module defining it), resolved on first use and then kept in
    the package's namespace."""
    modules = dict(lazy or {})

    def __getattr__(name: str) -> Any:
        if name == "__version__" and distribution is not None:
            value: Any = _version(distribution)
        elif name in modules:
            value = getattr(importlib.import_module(modules[name]), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        vars(sys.modules[package])[name] = value
        return value

    return __getattr__
