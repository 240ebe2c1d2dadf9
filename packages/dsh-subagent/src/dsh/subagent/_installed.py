"""Installed distributions' metadata read without :mod:`importlib.metadata`: one entry-point
group, and a distribution's version.

Reading through ``importlib.metadata`` (its distribution objects, the ``email`` parser of every
``METADATA``) costs a start-up milliseconds it spends before the product starts
(docs/performance.md, "Start-up"). These readers open only the files they need, along
``sys.path``, in the order ``importlib.metadata`` finds them: the path's entries in turn; in a
folder, its ``*.dist-info`` then its ``*.egg-info`` entries, grouped by normalised project name
in listing order; the first distribution of a name shadows the rest.

Where ``sys.path`` or ``sys.meta_path`` holds something they do not read (a zip or an egg on the
path, a finder of distributions other than the standard path finder), they answer ``None`` and
the caller asks ``importlib.metadata``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Sequence
from importlib import import_module
from importlib.machinery import PathFinder
from typing import Any, NamedTuple

__all__ = ["DeclaredEntry", "declared_entries", "installed_version"]

_NOT_NAME = re.compile(r"[-_.]+")


class DeclaredEntry(NamedTuple):
    """One ``name = module:attr`` line of a group, as its distribution declared it."""

    name: str
    value: str

    def load(self) -> Any:
        """The object the entry names, imported as ``EntryPoint.load`` imports it."""
        target = self.value.partition("[")[0].strip()  # extras name requirements, not objects
        module_name, _, attributes = target.partition(":")
        found: Any = import_module(module_name.strip())
        for attribute in filter(None, attributes.strip().split(".")):
            found = getattr(found, attribute)
        return found


def _normalised(project: str) -> str:
    return _NOT_NAME.sub("_", project).lower()


def _project(metadata_dir: str) -> str:
    # "Foo.Bar-1.0.dist-info" -> "foo_bar", as importlib.metadata names a distribution by its
    # folder.
    return _normalised(metadata_dir.rpartition(".")[0].partition("-")[0])


# Paths are strings and os functions here: Path objects for a site-packages listing cost this
# start-up path about a millisecond.


def _metadata_dirs(folder: str) -> list[str] | None:
    """The folder's distributions' metadata folders in ``importlib.metadata``'s order; ``None``
    when the path entry is not a plain folder this reader understands."""
    root = folder or "."
    if root.lower().endswith(".egg"):
        return None
    try:
        children = os.listdir(root)  # noqa: PTH208 - see above
    except NotADirectoryError:  # a zip or another file on the path
        return None
    except OSError:  # missing or unreadable: importlib.metadata finds nothing there either
        return []
    # Two tables (dist-info, then egg-info), each grouped by project in listing order.
    kinds: tuple[dict[str, list[str]], dict[str, list[str]]] = ({}, {})
    for child in children:
        low = child.lower()
        if low.endswith((".dist-info", ".egg-info")):
            kinds[low.endswith(".egg-info")].setdefault(_project(low), []).append(child)
    return [
        os.path.join(root, child)  # noqa: PTH118 - see above
        for kind in kinds
        for group in kind.values()
        for child in group
    ]


def _read(metadata_dir: str, name: str) -> str | None:
    try:
        with open(os.path.join(metadata_dir, name), encoding="utf-8") as file:  # noqa: PTH118, PTH123
            return file.read()
    except OSError:
        return None


def _group_lines(text: str, group: str) -> Iterator[DeclaredEntry]:
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
        elif section == group:
            name, _, value = line.partition("=")
            yield DeclaredEntry(name.strip(), value.strip())


def _readable_finders() -> bool:
    return all(
        finder is PathFinder or getattr(finder, "find_distributions", None) is None
        for finder in sys.meta_path
    )


def _distributions(path: Sequence[str] | None) -> Iterator[tuple[str, str]] | None:
    """(normalised project, metadata folder) of each distribution in discovery order, shadowed
    ones left out; ``None`` where ``importlib.metadata`` would see what this cannot."""
    if not _readable_finders():
        return None
    found: list[tuple[str, str]] = []
    seen: set[str] = set()
    for folder in sys.path if path is None else path:
        dirs = _metadata_dirs(folder)
        if dirs is None:
            return None
        for metadata_dir in dirs:
            project = _project(os.path.basename(metadata_dir))  # noqa: PTH119
            if project not in seen:  # an earlier distribution of the name shadows it
                seen.add(project)
                found.append((project, metadata_dir))
    return iter(found)


def installed_version(distribution: str, path: Sequence[str] | None = None) -> str | None:
    """The ``Version`` of ``distribution``'s metadata as ``importlib.metadata.version`` reads
    it; ``None`` where this reader cannot tell (not found, or not readable here)."""
    distributions = _distributions(path)
    wanted = _normalised(distribution)
    for project, metadata_dir in distributions or ():
        if project != wanted:
            continue
        for line in (_read(metadata_dir, "METADATA") or "").splitlines():
            if not line.strip():  # the headers end at the first blank line
                break
            if line.startswith("Version:"):
                return line.partition(":")[2].strip()
        return None
    return None


def declared_entries(
    group: str, path: Sequence[str] | None = None
) -> tuple[DeclaredEntry, ...] | None:
    """The group's entries of the distributions along ``path`` (``sys.path``), first one per
    name, in discovery order; ``None`` where this reader cannot see what ``importlib.metadata``
    would."""
    distributions = _distributions(path)
    if distributions is None:
        return None
    entries: dict[str, DeclaredEntry] = {}
    for _, metadata_dir in distributions:
        for entry in _group_lines(_read(metadata_dir, "entry_points.txt") or "", group):
            entries.setdefault(entry.name, entry)
    return tuple(entries.values())
