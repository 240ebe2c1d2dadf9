"""Entry-point discovery of provider kinds (``dsh.subagent.providers``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pydantic

from dsh.subagent._installed import declared_entries
from dsh.subagent._types import SubagentProvider
from dsh.subagent.errors import SubagentError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = [
    "PROVIDER_ENTRY_POINT_GROUP",
    "InstallRequirements",
    "installed_provider_kinds",
    "load_provider",
    "provider_entry_points",
]

_log = logging.getLogger("dsh.subagent")

PROVIDER_ENTRY_POINT_GROUP = "dsh.subagent.providers"
"""The entry-point group whose names are provider kinds and whose objects are provider classes."""

InstallRequirements = Mapping[str, str]
"""Provider kind -> the pip requirement that installs it (the caller's table; the seam has none)."""


class _Entry(Protocol):
    @property
    def name(self) -> str: ...

    def load(self) -> Any: ...


def provider_entry_points() -> tuple[EntryPoint, ...]:
    """The installed entry points of the group, first one per name, in discovery order, with
    their distributions (``dsh doctor`` names them).

    Reading the metadata imports nothing, so a broken plugin cannot break discovery.
    """
    from importlib.metadata import entry_points

    seen: dict[str, EntryPoint] = {}
    for entry in entry_points(group=PROVIDER_ENTRY_POINT_GROUP):
        seen.setdefault(entry.name, entry)
    return tuple(seen.values())


def _provider_entries() -> Sequence[_Entry]:
    # The start-up path reads entry_points.txt itself (._installed); importlib.metadata
    # answers where that reader cannot.
    declared = declared_entries(PROVIDER_ENTRY_POINT_GROUP)
    return declared if declared is not None else provider_entry_points()


def installed_provider_kinds() -> tuple[str, ...]:
    """The installed provider kinds (entry-point names), sorted."""
    return tuple(sorted(entry.name for entry in _provider_entries()))


def _install_hint(kind: str, requirements: InstallRequirements) -> str:
    requirement = requirements.get(kind)
    if requirement is not None:
        return f'install it with pip install "{requirement}"'
    if not requirements:
        return "install the package that provides it"
    choices = " or ".join(f'pip install "{r}"' for r in requirements.values())
    return f"install a provider, for example {choices}"


def _reinstall_hint(kind: str, requirements: InstallRequirements) -> str:
    requirement = requirements.get(kind)
    if requirement is not None:
        return f'reinstall it with pip install --force-reinstall "{requirement}"'
    return "reinstall the package that provides it"


def _config_problems(error: pydantic.ValidationError) -> str:
    # Field locations and rule messages only: the rejected input values never appear.
    problems = []
    for detail in error.errors(include_url=False, include_input=False, include_context=False):
        location = ".".join(str(part) for part in detail["loc"]) or "(config)"
        problems.append(f"{location}: {detail['msg']}")
    return "; ".join(problems)


def load_provider(
    kind: str,
    config: Mapping[str, Any] | None = None,
    *,
    install_requirements: InstallRequirements | None = None,
) -> SubagentProvider:
    """Build the provider of ``kind`` from ``config`` via the kind's ``from_config(mapping)``.

    ``install_requirements`` (kind -> pip requirement) words the install and reinstall hints of
    the errors; it comes from the layer that knows how its kinds are installed (the tool layer's
    extras), so this seam names no product.

    Only the requested entry point is imported; the others are never touched. Loading starts no
    process and does no PATH lookup (provider classes defer both to ``start()``).
    """
    requirements = install_requirements or {}
    entries = {entry.name: entry for entry in _provider_entries()}
    entry = entries.get(kind)
    if entry is None:
        installed = ", ".join(sorted(entries)) or "none"
        raise SubagentError(
            f'no subagent provider kind "{kind}" is installed (installed kinds: {installed}); '
            f"{_install_hint(kind, requirements)}",
            code="UNKNOWN_PROVIDER_KIND",
        )
    try:
        provider_class = entry.load()
    except Exception as error:
        _log.debug("loading subagent provider kind %r failed", kind, exc_info=error)
        raise SubagentError(
            f'the subagent provider kind "{kind}" is installed but failed to import; '
            f"{_reinstall_hint(kind, requirements)}",
            code="PROVIDER_LOAD_FAILED",
        ) from error
    from_config = getattr(provider_class, "from_config", None)
    if not callable(from_config):
        raise SubagentError(
            f'the subagent provider kind "{kind}" does not name a provider class with '
            "from_config(mapping)",
            code="PROVIDER_LOAD_FAILED",
        )
    try:
        provider = from_config(dict(config or {}))
    except pydantic.ValidationError as error:
        raise SubagentError(
            f'invalid config for subagent provider kind "{kind}": {_config_problems(error)}',
            code="INVALID_PROVIDER_CONFIG",
        ) from error
    except SubagentError:
        raise
    except Exception as error:
        _log.debug("building subagent provider kind %r failed", kind, exc_info=error)
        raise SubagentError(
            f'the subagent provider kind "{kind}" could not be built from its config',
            code="PROVIDER_LOAD_FAILED",
        ) from error
    if not isinstance(provider, SubagentProvider):
        raise SubagentError(
            f'the subagent provider kind "{kind}" built an object that is not a SubagentProvider',
            code="PROVIDER_LOAD_FAILED",
        )
    return provider
