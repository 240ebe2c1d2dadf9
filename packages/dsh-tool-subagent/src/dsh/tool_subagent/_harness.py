"""Profiles (TOML, validated with pydantic) and the ``Harness`` they build."""

from __future__ import annotations

import logging
import os
import tomllib
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from dsh.jobs import MEMORY_STORE, Executor, JobRegistry, JobsConfig, JobStore, executor_for
from dsh.jobs.errors import JobStoreError
from dsh.jobs.tools import JOB_TOOL_NAMES, ToolBase, job_tools
from dsh.subagent import (
    SubagentError,
    SubagentEvent,
    SubagentService,
    SubagentStarted,
    installed_provider_kinds,
)
from dsh.tool_subagent._contract import Tool
from dsh.tool_subagent._detached import DetachedExecutor
from dsh.tool_subagent._known_providers import KNOWN_PROVIDERS, load_provider
from dsh.tool_subagent._output_schema import PROFILE_DIR
from dsh.tool_subagent._portable_job import WORKER_SETUP
from dsh.tool_subagent._tool import SubagentTool, SubagentToolConfig
from dsh.tool_subagent.errors import MountError, ProfileError

__all__ = [
    "Harness",
    "ProfileModel",
    "ProviderEntry",
    "default_profile",
    "default_tool_name",
    "jobs_config",
    "read_profile",
]

logger = logging.getLogger("dsh.tool_subagent")


class ProviderEntry(BaseModel):
    """One ``[[provider]]`` row: an entry-point ``kind``, its provider ``config``, and the host's
    ``max_concurrent``: at most this many runs of the provider in flight in this process, across
    all owners, the rest waiting in a fair queue (``None``: no limit; docs/liveness.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str = Field(min_length=1)
    config: dict[str, Any] = Field(default_factory=dict)
    max_concurrent: int | None = Field(default=None, ge=1, strict=True)


class ProfileModel(BaseModel):
    """A whole profile: providers, delegation tools and the job stack."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: list[ProviderEntry] = Field(default_factory=list)
    tool: list[SubagentToolConfig] = Field(default_factory=list)
    jobs: JobsConfig = Field(default_factory=JobsConfig)


def _location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(profile)"


def _at(field: str, message: object) -> ProfileError:
    """The error for one failing ``field``, which it names in its text and carries as ``field``."""
    return ProfileError(f"{field}: {message}", field=field)


def _problems(error: pydantic.ValidationError, prefix: tuple[int | str, ...] = ()) -> ProfileError:
    """Every field pydantic rejected, in one error whose ``field`` is the first of them."""
    details = error.errors(include_url=False, include_input=False, include_context=False)
    places = [_location(prefix + tuple(detail["loc"])) for detail in details]
    lines = [f"{place}: {detail['msg']}" for place, detail in zip(places, details, strict=True)]
    return ProfileError("; ".join(lines), field=places[0] if places else None)


def read_profile(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A profile file's TOML as data; a file that cannot be read or parsed raises
    :class:`ProfileError` (its path and the OS reason: for the operator, not a model)."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ProfileError(f"profile: cannot read {os.fspath(path)}: {reason}") from exc
    except UnicodeDecodeError as exc:
        raise ProfileError("profile: the file is not UTF-8 text (TOML must be)") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"profile: invalid TOML ({exc})") from exc


def jobs_config(data: Mapping[str, Any]) -> JobsConfig:
    """A profile's ``[jobs]`` table alone, checked as :meth:`Harness.from_profile` checks it."""
    try:
        return JobsConfig.model_validate(data.get("jobs", {}))
    except pydantic.ValidationError as exc:
        raise _problems(exc, ("jobs",)) from exc


def default_profile() -> dict[str, Any]:
    """Every installed provider kind under its default name, one tool each, and the job stack."""
    providers = [{"kind": kind} for kind in installed_provider_kinds()]
    return {"provider": providers, "jobs": {}}


#: The product each shipped provider kind runs, as tool descriptions name it.
PRODUCTS = {known.kind: known.product for known in KNOWN_PROVIDERS}


def _provider_name(entry: ProviderEntry) -> str:
    """The name a profile entry's provider will have: its ``provider_name``, else its kind (the
    shipped providers' default)."""
    name = entry.config.get("provider_name")
    return name if isinstance(name, str) and name else entry.kind


def _narrowed(
    model: ProfileModel, tool: str | None, *, explicit_tools: bool
) -> tuple[int, int | None] | None:
    """The indices of the provider and of the ``[[tool]]`` (``None``: a default tool) that the
    delegation tool ``tool`` (``None``: the first one) needs, or ``None`` when the profile does
    not show them (the caller then builds everything)."""
    names = [_provider_name(e) for e in model.provider]
    if tool is None:
        if explicit_tools and model.tool:
            tool = model.tool[0].tool_name
        elif not explicit_tools and names:
            tool = default_tool_name(names[0])
        else:
            return None
    if explicit_tools:
        found = [i for i, config in enumerate(model.tool) if config.tool_name == tool]
        if len(found) != 1:
            return None
        tool_index: int | None = found[0]
        wanted = model.tool[found[0]].provider
    else:
        matches = [name for name in names if default_tool_name(name) == tool]
        if len(matches) != 1:
            return None
        tool_index, wanted = None, matches[0]
    providers = [i for i, name in enumerate(names) if name == wanted]
    return (providers[0], tool_index) if len(providers) == 1 else None


def default_tool_name(provider_name: str) -> str:
    """``subagent_<name>``, with ``-`` turned into ``_`` (``subagent_claude_code``)."""
    return "subagent_" + provider_name.replace("-", "_")


class Harness:
    """Providers (``subagents``), the job stack (``jobs``) and the model-visible ``tools``."""

    def __init__(
        self,
        subagents: SubagentService,
        jobs: JobRegistry,
        tools: tuple[Tool, ...],
        kinds: dict[str, str],
    ) -> None:
        self.subagents = subagents
        self.jobs = jobs
        self.tools = tools
        self._kinds = kinds
        self._starts = 0
        self._unsubscribe = subagents.subscribe(self._count)

    def _count(self, event: SubagentEvent) -> None:
        if isinstance(event, SubagentStarted):
            self._starts += 1

    @property
    def delegation_tools(self) -> tuple[SubagentTool, ...]:
        return tuple(t for t in self.tools if isinstance(t, SubagentTool))

    def tool(self, name: str) -> Tool:
        for tool in self.tools:
            if tool.name == name:
                return tool
        raise KeyError(name)

    def open_job_store(self) -> JobStore:
        """Open the job store now (it opens at first use otherwise): a store that cannot be
        used raises :class:`ProfileError` naming ``jobs.store``, its path and what to do."""
        try:
            return self.jobs.open_store()
        except JobStoreError as exc:
            raise _at("jobs.store", exc) from exc

    @classmethod
    def from_profile(
        cls,
        profile: str | os.PathLike[str] | Mapping[str, Any] | None = None,
        *,
        detach: bool = False,
        tool: str | None = None,
        one_tool: bool = False,
    ) -> Self:
        """Build a harness from a TOML file, a mapping, or (``None``) the default profile.

        Building starts no process (and opens no job store). Errors raise
        :class:`ProfileError` naming table, index, field. ``detach`` runs every background job
        in a detached dsh process (``dsh run --detach``), as ``[jobs] keep_on_close`` does.
        ``one_tool`` builds only the delegation tool named ``tool`` (``None``: the first one) and
        its provider (``dsh run``: another product's modules are never imported), when the
        profile shows which provider that is; otherwise, or if no such tool is found, everything
        is built.
        """
        data: Mapping[str, Any]
        is_default = profile is None
        context: dict[str, Any] = {}
        if profile is None:
            data = default_profile()
        elif isinstance(profile, Mapping):
            data = profile
        else:
            data = read_profile(profile)
            context[PROFILE_DIR] = Path(profile).parent  # a schema file's path starts there
        try:
            model = ProfileModel.model_validate(data, context=context)
        except pydantic.ValidationError as exc:
            raise _problems(exc) from exc
        only = None
        if one_tool:
            only = _narrowed(model, tool, explicit_tools=not is_default and "tool" in data)
        return cls._build(model, data, is_default, detach, only)

    @classmethod
    def _build(
        cls,
        model: ProfileModel,
        data: Mapping[str, Any],
        is_default: bool,
        detach: bool,
        only: tuple[int, int | None] | None,
    ) -> Self:
        """``only``: build just the provider at this index and the tool at that one (``None``:
        the provider's default tool); errors still name each table's index in the profile."""
        executor: Executor
        if detach or model.jobs.keep_on_close:
            if model.jobs.store == MEMORY_STORE:
                raise _at("jobs.store", 'a detached job needs a file store, not "memory"')
            executor = DetachedExecutor(model.jobs)
        else:
            try:
                executor = executor_for(model.jobs, worker_setup=WORKER_SETUP)
            except ImportError as exc:
                raise _at("jobs.executor", exc) from exc
        service = SubagentService()
        kinds: dict[str, str] = {}
        entries: dict[str, tuple[str, dict[str, Any]]] = {}
        concurrency: dict[str, int | None] = {}
        for index, entry in enumerate(model.provider):
            if only is not None and index != only[0]:
                continue
            try:
                provider = load_provider(entry.kind, entry.config)
            except SubagentError as exc:
                cause = exc.__cause__
                if isinstance(cause, pydantic.ValidationError):
                    raise _problems(cause, ("provider", index, "config")) from exc
                raise _at(f"provider[{index}].kind", exc) from exc
            try:
                service.register(provider)
            except SubagentError as exc:
                raise _at(f"provider[{index}].config.provider_name", exc) from exc
            kinds[provider.name] = entry.kind
            entries[provider.name] = (entry.kind, dict(entry.config))
            concurrency[provider.name] = entry.max_concurrent
        # Each tool with its index in the profile, which errors name.
        tool_configs = list(enumerate(model.tool))
        if only is not None and only[1] is not None:
            tool_configs = [tool_configs[only[1]]]
        if is_default or (not model.tool and "tool" not in data):
            tool_configs = [
                (
                    index,
                    SubagentToolConfig(
                        provider=name,
                        tool_name=default_tool_name(name),
                        max_depth="provider-managed",
                    ),
                )
                for index, name in enumerate(service.names())
            ]
        jobs = JobRegistry(model.jobs, executor=executor)
        tools: list[Tool] = []
        seen = set(JOB_TOOL_NAMES)
        for index, config in tool_configs:
            if config.tool_name in seen:
                raise _at(
                    f"tool[{index}].tool_name",
                    f'"{config.tool_name}" is already used in this harness',
                )
            seen.add(config.tool_name)
            try:
                product = PRODUCTS.get(kinds.get(config.provider, ""))
                portable = entries.get(config.provider)
                tools.append(
                    SubagentTool(
                        config,
                        service,
                        jobs,
                        product=product,
                        portable_provider=portable,
                        max_concurrent=concurrency.get(config.provider),
                    )
                )
            except MountError as exc:
                raise _at(f"tool[{index}].{exc.field}", exc) from exc
        tools.extend(job_tools(jobs))
        return cls(service, jobs, tuple(tools), kinds)

    def describe(self) -> dict[str, Any]:
        """The composition check, as JSON-ready data."""
        providers = []
        for name in self.subagents.names():
            provider = self.subagents.get(name)
            assert provider is not None
            providers.append(
                {
                    "name": name,
                    "kind": self._kinds.get(name),
                    # Every field, so a new capability shows with no change here.
                    "capabilities": asdict(provider.capabilities),
                    "inherits_parent_context": provider.inherits_parent_context,
                }
            )
        tools = []
        for tool in self.delegation_tools:
            schema = tool.input_schema
            tools.append(
                {
                    "name": tool.name,
                    "provider": tool.config.provider,
                    "parameters": sorted(schema["properties"]),
                    "required": list(schema["required"]),
                }
            )
        job_tool_names = [t.name for t in self.tools if isinstance(t, ToolBase) and t.is_job_tool]
        return {
            "providers": providers,
            "tools": tools,
            "job_tools": job_tool_names,
            "starts": self._starts,
        }

    async def aclose(self) -> None:
        """Close the jobs (their runs tear down first), the subagent service, then the providers.

        A provider with an ``aclose()`` (the product providers: their warm processes) is closed
        last, since the harness built it from the profile.
        """
        try:
            await self.jobs.aclose()
        finally:
            self._unsubscribe()
            try:
                await self.subagents.aclose()
            finally:
                await self._close_providers()

    async def _close_providers(self) -> None:
        failures: list[Exception] = []
        for name in self.subagents.names():
            close = getattr(self.subagents.get(name), "aclose", None)
            if close is None:
                continue
            try:
                await close()
            except Exception as exc:
                failures.append(exc)
        if failures:
            raise failures[0]

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
