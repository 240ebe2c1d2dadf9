"""The installed providers' demo plans, found through the entry points, and the demo's profile.

Each provider kind is reached through ``dsh.subagent.providers`` and asked for its optional
``demo()`` hook (``dsh.subagent.DemoPlan``), so this layer imports no product. Kinds this
distribution ships come first, in :data:`KNOWN_PROVIDERS` order, then any other kind by name.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from dsh.subagent import PROVIDER_ENTRY_POINT_GROUP, DemoPlan
from dsh.tool_subagent._demo.jobs import LOCAL_JOBS
from dsh.tool_subagent._known_providers import KNOWN_PROVIDERS

__all__ = ["BROKEN", "InstalledPlan", "demo_profile", "installed_plans", "missing_providers"]

logger = logging.getLogger("dsh.tool_subagent")

BROKEN = (
    "a provider package is installed but broken; reinstall it with"
    ' pip install --force-reinstall "dsh-tool-subagent[all]"'
)
#: Every demo run uses these on top of the plan's own config.
_COMMON_CONFIG = {"stderr": "discard", "dispose_grace_ms": 2000}


@dataclass(frozen=True, slots=True)
class InstalledPlan:
    """A provider kind and the plan its ``demo()`` hook returned."""

    kind: str
    plan: DemoPlan


def missing_providers(kinds: Iterable[str]) -> str | None:
    """What to install when a product this distribution ships is missing, else ``None``."""
    installed = set(kinds)
    missing = [known for known in KNOWN_PROVIDERS if known.kind not in installed]
    if not missing:
        return None
    names = " and ".join(f"the {known.product} provider" for known in missing)
    if len(missing) == 1:
        return (
            f'{names} is not installed; install it with pip install "dsh-tool-subagent'
            f'[{missing[0].extra}]" (or "dsh-tool-subagent[all]" for everything)'
        )
    return f'{names} are not installed; install them with pip install "dsh-tool-subagent[all]"'


def _ordered(kinds: Iterable[str]) -> list[str]:
    order = {known.kind: index for index, known in enumerate(KNOWN_PROVIDERS)}
    return sorted(set(kinds), key=lambda kind: (order.get(kind, len(order)), kind))


def installed_plans(kinds: Iterable[str]) -> list[InstalledPlan]:
    """The plans of the installed ``kinds`` that have a ``demo()`` hook, in the demo's order.

    Raises ``LookupError`` (:data:`BROKEN`) when a kind fails to import or its hook fails.
    """
    entries: dict[str, metadata.EntryPoint] = {}
    for entry in metadata.entry_points(group=PROVIDER_ENTRY_POINT_GROUP):
        entries.setdefault(entry.name, entry)
    plans = []
    for kind in _ordered(kinds):
        found = entries.get(kind)
        if found is None:
            continue
        try:
            hook = getattr(found.load(), "demo", None)
            if not callable(hook):
                continue  # a provider without a demo takes no part in it
            plan = hook()
        except Exception as exc:
            logger.debug("the demo hook of provider kind %r failed", kind, exc_info=exc)
            raise LookupError(BROKEN) from exc
        if not isinstance(plan, DemoPlan):
            raise LookupError(BROKEN)
        plans.append(InstalledPlan(kind, plan))
    return plans


def demo_profile(
    configs: Sequence[tuple[str, Mapping[str, Any]]], jobs: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The demo's profile: each (kind, plan config) as a provider, with the demo's common fields,
    and its ``[jobs]`` table (``dsh demo --executor``; by default local, 10 jobs per owner)."""
    return {
        "provider": [
            {"kind": kind, "config": {**config, **_COMMON_CONFIG}} for kind, config in configs
        ],
        "jobs": dict(jobs if jobs is not None else LOCAL_JOBS),
    }
