"""``dsh doctor``: installed provider kinds and each configured instance's own checks.

Providers are reached only through the ``dsh.subagent.providers`` entry points; they report their
checks through the optional ``doctor()`` hook (see ``dsh.subagent.kit.DoctorCheck``), called on each
instance (the default instance of every installed kind, or a profile's instances), so this
module never imports a product package. Nothing is spawned. The rows name the credential
sources each instance's product will see (variable names, whether a login file exists), never
a value. The ``containment`` rows say which containment layers this machine gives a run (the
kernel layer, or why not) and which limits it can enforce; an instance whose ``limits`` cannot
be enforced here (and are not best effort) fails its ``limits`` row.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from importlib import metadata
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dsh.subagent import PROVIDER_ENTRY_POINT_GROUP
from dsh.subprocess import Limits, kernel_layer, limits_problem

__all__ = ["doctor"]

EXIT_OK = 0
EXIT_BROKEN = 1

Row = tuple[str, str, str, bool]
"""(provider, check, value, ok)."""


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


def _hook_rows(label: str, target: Any) -> list[Row]:
    """The ``doctor()`` rows of an instance or class, or one row saying why there are none."""
    hook = getattr(target, "doctor", None)
    if not callable(hook):
        return [(label, "checks", "(provider has no doctor hook)", True)]
    try:
        return [(label, str(check), str(value), bool(ok)) for check, value, ok in hook()]
    except Exception:
        return [(label, "checks", "doctor hook raised", False)]


def _check_rows(instances: Iterable[tuple[str, Any]]) -> list[Row]:
    """Every row, in table order: each installed kind, then each configured instance."""
    configured = list(instances)
    rows: list[Row] = []
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
        if not configured:
            rows.extend(_hook_rows(entry.name, _default_instance(provider_class)))
    for name, provider in configured:
        rows.extend(_hook_rows(name, provider))
    if not seen:
        rows.append(("(none)", "providers", 'pip install "dsh-tool-subagent[all]"', False))
    return rows


CONTAINMENT = "containment"
_FALLBACK_LAYERS = "supervisor (subreaper) > spawner > sampler > member record"


def _containment_rows(configured: list[tuple[str, Any]]) -> list[Row]:
    """The machine's containment layers and limits, then each instance's ``limits``."""
    layer = kernel_layer()
    state, limits = layer.describe()
    layers = f"kernel (cgroup) > {_FALLBACK_LAYERS}" if layer.active else _FALLBACK_LAYERS
    rows: list[Row] = [
        (CONTAINMENT, "layers", layers, True),
        (CONTAINMENT, "kernel layer", state, True),  # the fallback is never a failure
        (CONTAINMENT, "limits", limits, True),
    ]
    for name, provider in configured:
        wanted = Limits.of(getattr(provider, "config", None))
        if wanted is None:
            continue
        problem = limits_problem(wanted)
        if problem is not None:
            rows.append((name, "limits", problem, False))
        else:
            mode = "best effort" if wanted.best_effort else "enforced"
            rows.append((name, "limits", f"{', '.join(wanted.requested)}: {mode}", True))
    return rows


def _print_json(rows: list[Row], healthy: bool) -> None:
    providers: dict[str, list[dict[str, Any]]] = {}
    for name, check, value, ok in rows:
        providers.setdefault(name, []).append({"check": check, "value": value, "ok": ok})
    listed = [{"kind": name, "checks": checks} for name, checks in providers.items()]
    print(json.dumps({"ok": healthy, "providers": listed}, indent=2))


def doctor(
    console: Console | None = None,
    instances: Iterable[tuple[str, Any]] = (),
    *,
    as_json: bool = False,
) -> int:
    """Print the doctor table (or JSON); 0 when every provider is healthy, 1 otherwise or with none.

    ``instances`` (name, provider) are a profile's configured providers; without them each
    installed kind is checked through its default instance.
    """
    configured = list(instances)
    rows = _check_rows(configured) + _containment_rows(configured)
    healthy = all(ok for *_, ok in rows)
    if as_json:
        _print_json(rows, healthy)
        return EXIT_OK if healthy else EXIT_BROKEN
    table = Table(title="dsh doctor")
    for column in ("provider", "check", "value", "ok"):
        table.add_column(column)
    for name, check, value, ok in rows:
        # escaped: "[all]" is text, not rich markup
        table.add_row(escape(name), escape(check), escape(value), "yes" if ok else "NO")
    (console or Console()).print(table)
    return EXIT_OK if healthy else EXIT_BROKEN
