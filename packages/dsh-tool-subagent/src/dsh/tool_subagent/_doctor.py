"""``dsh doctor``: installed provider kinds and each one's own install checks.

Providers are reached only through the ``dsh.subagent.providers`` entry points; their classes
report their checks through the optional ``doctor()`` hook (see ``dsh.subagent.DoctorCheck``), so
this module never imports a product package. Nothing is spawned.
"""

from __future__ import annotations

import json
from importlib import metadata
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dsh.subagent import PROVIDER_ENTRY_POINT_GROUP

__all__ = ["doctor"]

EXIT_OK = 0
EXIT_BROKEN = 1


def _dist_label(entry: metadata.EntryPoint) -> str:
    if entry.dist is None:
        return "?"
    try:
        return f"{entry.dist.name} {metadata.version(entry.dist.name)}"
    except metadata.PackageNotFoundError:
        return f"{entry.dist.name} ?"


def _check_rows() -> list[tuple[str, str, str, bool]]:
    """(provider kind, check, value, ok) rows, in table order."""
    rows: list[tuple[str, str, str, bool]] = []
    seen: set[str] = set()
    for entry in metadata.entry_points(group=PROVIDER_ENTRY_POINT_GROUP):
        if entry.name in seen:
            continue
        seen.add(entry.name)
        rows.append((entry.name, "package", _dist_label(entry), True))
        try:
            provider_class = entry.load()
        except Exception:
            rows.append((entry.name, "import", "failed", False))
            continue
        hook = getattr(provider_class, "doctor", None)
        if not callable(hook):
            rows.append((entry.name, "checks", "(provider has no doctor hook)", True))
            continue
        try:
            checks = [(str(check), str(value), bool(ok)) for check, value, ok in hook()]
        except Exception:
            rows.append((entry.name, "checks", "doctor hook raised", False))
            continue
        rows.extend((entry.name, *check) for check in checks)
    if not seen:
        rows.append(("(none)", "providers", 'pip install "dsh-tool-subagent[all]"', False))
    return rows


def _print_json(rows: list[tuple[str, str, str, bool]], healthy: bool) -> None:
    providers: dict[str, list[dict[str, Any]]] = {}
    for kind, check, value, ok in rows:
        providers.setdefault(kind, []).append({"check": check, "value": value, "ok": ok})
    listed = [{"kind": kind, "checks": checks} for kind, checks in providers.items()]
    print(json.dumps({"ok": healthy, "providers": listed}, indent=2))


def doctor(console: Console | None = None, *, as_json: bool = False) -> int:
    """Print the doctor table (or JSON); 0 when every provider is healthy, else 1 (or none)."""
    rows = _check_rows()
    healthy = all(ok for *_, ok in rows)
    if as_json:
        _print_json(rows, healthy)
        return EXIT_OK if healthy else EXIT_BROKEN
    table = Table(title="dsh doctor")
    for column in ("provider kind", "check", "value", "ok"):
        table.add_column(column)
    for kind, check, value, ok in rows:
        # escaped: "[all]" is text, not rich markup
        table.add_row(escape(kind), escape(check), escape(value), "yes" if ok else "NO")
    (console or Console()).print(table)
    return EXIT_OK if healthy else EXIT_BROKEN
