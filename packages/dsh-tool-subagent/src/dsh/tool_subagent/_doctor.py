"""``dsh doctor``: installed provider kinds and each one's own install checks.

Providers are reached only through the ``dsh.subagent.providers`` entry points; their classes
report their checks through the optional ``doctor()`` hook (see ``dsh.subagent.DoctorCheck``), so
this module never imports a product package. Nothing is spawned.
"""

from __future__ import annotations

from importlib import metadata

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


def doctor(console: Console | None = None) -> int:
    """Print the doctor table; 0 when every provider is healthy, 1 otherwise or with none."""
    table = Table(title="dsh doctor")
    for column in ("provider kind", "check", "value", "ok"):
        table.add_column(column)

    def add_row(*cells: str) -> None:
        table.add_row(*(escape(cell) for cell in cells))  # "[all]" is text, not rich markup

    healthy = True
    seen: set[str] = set()
    for entry in metadata.entry_points(group=PROVIDER_ENTRY_POINT_GROUP):
        if entry.name in seen:
            continue
        seen.add(entry.name)
        add_row(entry.name, "package", _dist_label(entry), "yes")
        try:
            provider_class = entry.load()
        except Exception:
            add_row(entry.name, "import", "failed", "NO")
            healthy = False
            continue
        hook = getattr(provider_class, "doctor", None)
        if not callable(hook):
            add_row(entry.name, "checks", "(provider has no doctor hook)", "yes")
            continue
        try:
            rows = [(str(check), str(value), bool(ok)) for check, value, ok in hook()]
        except Exception:
            add_row(entry.name, "checks", "doctor hook raised", "NO")
            healthy = False
            continue
        for check, value, ok in rows:
            add_row(entry.name, check, value, "yes" if ok else "NO")
            healthy = healthy and ok
    if not seen:
        add_row("(none)", "providers", 'pip install "dsh-tool-subagent[all]"', "NO")
        healthy = False
    (console or Console()).print(table)
    return EXIT_OK if healthy else EXIT_BROKEN
