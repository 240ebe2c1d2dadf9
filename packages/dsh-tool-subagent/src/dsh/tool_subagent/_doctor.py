"""``dsh doctor``: installed provider kinds and each configured instance's own checks.

Providers are reached only through the ``dsh.subagent.providers`` entry points; they report their
checks through the optional ``doctor()`` hook (see ``dsh.subagent.DoctorCheck``), called on each
instance (the default instance of every installed kind, or a profile's instances), so this
module never imports a product package. Nothing is spawned. The rows name the credential
sources each instance's product will see (variable names, whether a login file exists), never
a value.
"""

from __future__ import annotations

from collections.abc import Iterable
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


def _default_instance(provider_class: Any) -> Any:
    """The kind's default instance (what ``dsh run`` without a profile uses), else the class."""
    try:
        return provider_class.from_config({})
    except Exception:
        return provider_class


def _hook_rows(target: Any) -> list[tuple[str, str, bool]] | None:
    """The ``doctor()`` rows of an instance or class; ``None`` without a hook; raises on error."""
    hook = getattr(target, "doctor", None)
    if not callable(hook):
        return None
    return [(str(check), str(value), bool(ok)) for check, value, ok in hook()]


def doctor(console: Console | None = None, instances: Iterable[tuple[str, Any]] = ()) -> int:
    """Print the doctor table; 0 when every provider is healthy, 1 otherwise or with none.

    ``instances`` (name, provider) are a profile's configured providers; without them each
    installed kind is checked through its default instance.
    """
    table = Table(title="dsh doctor")
    for column in ("provider", "check", "value", "ok"):
        table.add_column(column)

    def add_row(*cells: str) -> None:
        table.add_row(*(escape(cell) for cell in cells))  # "[all]" is text, not rich markup

    healthy = True

    def add_checks(label: str, target: Any) -> None:
        nonlocal healthy
        try:
            rows = _hook_rows(target)
        except Exception:
            add_row(label, "checks", "doctor hook raised", "NO")
            healthy = False
            return
        if rows is None:
            add_row(label, "checks", "(provider has no doctor hook)", "yes")
            return
        for check, value, ok in rows:
            add_row(label, check, value, "yes" if ok else "NO")
            healthy = healthy and ok

    configured = list(instances)
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
        if not configured:
            add_checks(entry.name, _default_instance(provider_class))
    for name, provider in configured:
        add_checks(name, provider)
    if not seen:
        add_row("(none)", "providers", 'pip install "dsh-tool-subagent[all]"', "NO")
        healthy = False
    (console or Console()).print(table)
    return EXIT_OK if healthy else EXIT_BROKEN
