"""The model-visible delegation tool ``SubagentTool`` (``Tool`` and ``Caller`` in ``_contract``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from dsh.jobs import JobRegistry, JobWork
from dsh.jobs.tools import ToolBase, ToolResult
from dsh.subagent import (
    StopReason,
    SubagentError,
    SubagentResult,
    SubagentService,
    SubagentStartRequest,
)
from dsh.tool_subagent._arguments import DelegationArguments
from dsh.tool_subagent._contract import Caller, Tool
from dsh.tool_subagent._delegation import Interrupted, killed, run_to_end
from dsh.tool_subagent._job_work import background_outcome
from dsh.tool_subagent._limits import (
    DEFAULT_MAX_TOTAL_TOKENS,
    DEFAULT_STALL_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    RunLimits,
)
from dsh.tool_subagent._model_options import CommandLine
from dsh.tool_subagent._otel import DelegationLabels, trace_carrier
from dsh.tool_subagent._output_schema import OutputType, as_output, checked_schema, tool_schema
from dsh.tool_subagent._portable_job import portable_delegation
from dsh.tool_subagent._workspace import (
    DEFAULT_BRANCH_PREFIX,
    WorkspaceError,
    WorkspaceOptions,
    check_branch_prefix,
    find_repository,
    with_changes,
)
from dsh.tool_subagent.errors import MountError

__all__ = ["Caller", "SubagentTool", "SubagentToolConfig", "Tool", "failure_text"]

logger = logging.getLogger("dsh.tool_subagent")

BACKGROUND_DISABLED = "run_in_background is disabled for this tool instance"
DEFAULT_MAX_DEPTH = 3

#: A limit in seconds: a number (not a bool or a string) above 0 and finite.
Seconds = Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)]
#: A token cap: a whole number (not a bool, a float or a string) above 0.
Tokens = Annotated[int, Field(strict=True, gt=0)]
#: A cost cap in USD: a number above 0 and finite.
Usd = Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)]
BranchPrefix = Annotated[str, AfterValidator(check_branch_prefix)]

_HEADLINES = {
    StopReason.ABORTED: "subagent run was cancelled",
    StopReason.ERROR: "subagent run failed",
    StopReason.MAX_TOKENS: "subagent run hit its token limit before finishing",
    StopReason.REFUSAL: "subagent declined the task",
}


class SubagentToolConfig(BaseModel):
    """One ``[[tool]]`` row of a profile."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: str = Field(min_length=1)
    tool_name: str = Field(
        default="subagent", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$"
    )
    enable_run_in_background: bool = True
    background_mode: Literal["one-shot"] = "one-shot"
    #: Unset: 3 on a provider with the ``depth_limit`` capability, else ``"provider-managed"``
    #: (no shipped product provider can enforce a depth, so a bare ``[[tool]]`` row must work).
    max_depth: int | Literal["provider-managed"] | None = None
    #: The caller's wall-clock limit on one delegation, start included (docs/liveness.md).
    timeout_s: Seconds | None = DEFAULT_TIMEOUT_S
    # A field with a ``CommandLine`` marker is a ``dsh run`` option that overrides it for one
    # run (``_model_options``).
    #: The caller's limit on product silence: no activity stamp moved for this long.
    stall_timeout_s: Annotated[
        Seconds,
        CommandLine(
            "--stall-timeout",
            "stop the run after SECONDS without product activity (the tool's stall_timeout_s;"
            " default: the profile's, else 900), exit 1",
            "SECONDS",
            float,
        ),
    ] = DEFAULT_STALL_TIMEOUT_S
    #: The caller's spend caps (docs/liveness.md), checked on each usage report of the run.
    max_total_tokens: Annotated[
        Tokens,
        CommandLine(
            "--max-total-tokens",
            "stop the run once the product reports TOKENS tokens spent (the tool's"
            " max_total_tokens; default: the profile's, else 50000000), exit 1",
            "TOKENS",
            int,
        ),
    ] = DEFAULT_MAX_TOTAL_TOKENS
    max_output_tokens: Annotated[
        Tokens | None,
        CommandLine(
            "--max-output-tokens",
            "stop the run once the product reports TOKENS output tokens (max_output_tokens)",
            "TOKENS",
            int,
        ),
    ] = None
    #: Only for a provider that enforces a cost cap itself (``cost_limit``: Claude Code).
    max_cost_usd: Annotated[
        Usd | None,
        CommandLine(
            "--max-cost-usd",
            "stop the run once the product's own cost figure reaches USD (max_cost_usd;"
            " Claude Code only)",
            "USD",
            float,
        ),
    ] = None
    #: Where the product works: the caller's cwd, or a git worktree per run (docs/workspaces.md).
    workspace: Annotated[
        Literal["shared", "worktree"],
        CommandLine(
            "--workspace",
            "where the product works: the cwd (shared), or a git worktree of its repository"
            " whose changes come back as a branch (worktree); default: the tool's",
        ),
    ] = "shared"
    #: A worktree starts at the parent's ``HEAD``, or with its uncommitted changes too.
    worktree_base: Annotated[
        Literal["head", "working-tree"],
        CommandLine(
            "--worktree-base",
            "a worktree starts at HEAD, or with the uncommitted changes too (working-tree)",
        ),
    ] = "head"
    #: A worktree run's changes go to the branch ``<branch_prefix><job or run id>``.
    branch_prefix: Annotated[
        BranchPrefix,
        CommandLine("--branch-prefix", "a worktree run's branch prefix (default dsh/)", "PREFIX"),
    ] = DEFAULT_BRANCH_PREFIX

    #: The answer's JSON Schema for every delegation of this tool (a caller's own wins): an
    #: inline table, or the path of a JSON file (relative to the profile file's directory).
    output_schema: Annotated[
        dict[str, Any] | None, BeforeValidator(tool_schema), AfterValidator(checked_schema)
    ] = None

    @property
    def limits(self) -> RunLimits:
        return RunLimits(
            timeout_s=self.timeout_s,
            stall_timeout_s=self.stall_timeout_s,
            max_total_tokens=self.max_total_tokens,
            max_output_tokens=self.max_output_tokens,
            max_cost_usd=self.max_cost_usd,
        )

    @property
    def workspace_options(self) -> WorkspaceOptions | None:
        """The worktree settings, or ``None`` for a shared workspace."""
        if self.workspace == "shared":
            return None
        return WorkspaceOptions(self.workspace, self.worktree_base, self.branch_prefix)

    def model_post_init(self, context: Any, /) -> None:
        if isinstance(self.max_depth, int) and self.max_depth < 0:
            raise ValueError('max_depth must be an int >= 0 or "provider-managed"')


def failure_text(result: SubagentResult) -> str:
    """The model-visible text of a non-completed result."""
    reason = result.stop_reason
    headline = _HEADLINES.get(reason) if isinstance(reason, StopReason) else None
    text = headline or f"subagent run ended abnormally ({reason})"
    if result.diagnostic:
        text += "\nDiagnostic: " + result.diagnostic
    if result.text:
        text += "\nPartial output before the run ended:\n" + result.text
    return text


class SubagentTool(ToolBase[Caller]):
    """Delegates one self-contained task to a registered provider, in the foreground or as a Job."""

    # A delegation hands a task to a coding agent that may edit files and run commands in the
    # working directory, and that talks to a model service.
    behaviour_hints: ClassVar[Mapping[str, bool] | None] = {
        "read_only": False,
        "destructive": True,
        "idempotent": False,
        "open_world": True,
    }

    #: The arguments one delegation takes; their model-visible part is the input schema.
    arguments_model: ClassVar[type[DelegationArguments]] = DelegationArguments

    def __init__(
        self,
        config: SubagentToolConfig,
        service: SubagentService,
        jobs: JobRegistry,
        *,
        product: str | None = None,
        portable_provider: tuple[str, Mapping[str, Any]] | None = None,
        max_concurrent: int | None = None,
    ) -> None:
        """``product`` names the coding-agent product in the description (e.g. ``"Codex"``).

        ``portable_provider`` is the provider's profile entry (``kind``, ``config``): what an
        executor that runs jobs elsewhere (``JobRegistry.executor.portable``) sends instead of
        the live provider, to build the same provider where the job runs.

        ``max_concurrent`` is the provider's limit on runs in flight in this process (its
        profile entry's): every run of this tool first takes a slot in the provider's fair
        queue (``_queue``); ``None``: no queue.
        """
        self.portable_provider = portable_provider
        self.max_concurrent = max_concurrent
        provider = service.get(config.provider)
        if provider is None:
            raise MountError(
                f'tool "{config.tool_name}": no subagent provider registered'
                f' for "{config.provider}"',
                field="provider",
            )
        if config.max_depth is None:
            depth = DEFAULT_MAX_DEPTH if provider.capabilities.depth_limit else "provider-managed"
            config = config.model_copy(update={"max_depth": depth})
        if isinstance(config.max_depth, int) and not provider.capabilities.depth_limit:
            raise MountError(
                f'provider "{config.provider}" cannot enforce max_depth (no depth_limit capability)'
                ' — set max_depth = "provider-managed"',
                field="max_depth",
            )
        if config.max_cost_usd is not None and not provider.capabilities.cost_limit:
            raise MountError(
                f'provider "{config.provider}" cannot enforce max_cost_usd (no cost_limit'
                " capability: its product states no cost) — use max_total_tokens",
                field="max_cost_usd",
            )
        self.config = config
        self.service = service
        self.jobs = jobs
        self.inherits_parent_context = provider.inherits_parent_context
        self.name = config.tool_name
        self.product = product
        # A provider config's model, when it has one (both shipped providers do).
        model = getattr(getattr(provider, "config", None), "model", None)
        self.model = model if isinstance(model, str) and model else None
        kind = portable_provider[0] if portable_provider is not None else None
        self.labels = DelegationLabels(self.name, config.provider, kind, self.model)
        self.description = self._describe()
        super().__init__(
            self.arguments_model.input_schema(background=config.enable_run_in_background)
        )

    @property
    def result_schema(self) -> dict[str, Any] | None:
        """The schema every successful result's value matches, declared to a host that can carry
        it (``dsh mcp``'s ``outputSchema``, a framework's typed tool): the tool's fixed
        ``output_schema`` when it is an object schema and the tool cannot start a background job
        (a start answers with a job id, not the value). Another schema still shapes the answer,
        which comes back as its JSON text and ``ToolResult.value["structured_output"]``."""
        schema = self.config.output_schema
        if self.config.enable_run_in_background or schema is None:
            return None
        return schema if schema.get("type") == "object" else None

    def _describe(self) -> str:
        who = f"a {self.product} subagent" if self.product else "a subagent"
        facts = f'provider "{self.config.provider}"'
        if self.model:
            facts += f", model {self.model}"
        parts = [f"Delegate a self-contained task to {who} ({facts})."]
        if not self.inherits_parent_context:
            parts.append(
                "The subagent works in its own context: it does not see this conversation, so the"
                " prompt must be complete and standalone (goal, relevant files, constraints, what"
                " to return). It returns only its final result."
            )
        if self.config.enable_run_in_background:
            parts.append(
                "This call waits for the result by default. Set run_in_background: true to return"
                " a job id; collect with job_output and stop with job_kill."
            )
        return " ".join(parts)

    async def call(self, arguments: Mapping[str, Any], caller: Caller) -> ToolResult:
        if not self.config.enable_run_in_background and isinstance(arguments, Mapping):
            if arguments.get("run_in_background") is True:
                return ToolResult(text=BACKGROUND_DISABLED, is_error=True)
            if arguments.get("run_in_background") is False:
                arguments = {k: v for k, v in arguments.items() if k != "run_in_background"}
        return await super().call(arguments, caller)

    async def _call(self, arguments: Mapping[str, Any], caller: Caller) -> ToolResult:
        # The mapping passed the input schema, which is the model-visible part of the arguments
        # model with its constraints, so it is not validated twice. (pydantic would also refuse
        # a prompt holding an unpaired surrogate, which json.loads accepts, with its own line;
        # the provider's request check refuses it with the product's, before any spawn.)
        return await self._delegate(self.arguments_model.model_construct(**arguments), caller)

    async def delegate(
        self, arguments: DelegationArguments | Mapping[str, Any], caller: Caller
    ) -> ToolResult:
        """One delegation for a Python caller, who may set every field of the arguments model
        (the model sees only the input schema's). Arguments the model refuses, or a background
        run on a tool that disables it, are an ``is_error`` result naming the field."""
        if not isinstance(arguments, DelegationArguments):
            try:
                arguments = self.arguments_model.model_validate(arguments)
            except ValidationError as exc:
                error = exc.errors()[0]
                where = ".".join(str(part) for part in error["loc"]) or "arguments"
                text = f'invalid arguments: field "{where}": {error["msg"]}'
                return ToolResult(text=text, is_error=True)
        if arguments.run_in_background and not self.config.enable_run_in_background:
            return ToolResult(text=BACKGROUND_DISABLED, is_error=True)
        return await self._delegate(arguments, caller)

    async def _delegate(self, arguments: DelegationArguments, caller: Caller) -> ToolResult:
        if arguments.output_schema is None and self.config.output_schema is not None:
            arguments = arguments.model_copy(update={"output_schema": self.config.output_schema})
        depth = self.config.max_depth
        request = arguments.request(caller, depth if isinstance(depth, int) else None)
        if self.config.max_cost_usd is not None:  # the product's own cap; dsh checks it too
            request = replace(request, max_cost_usd=self.config.max_cost_usd)
        if self.config.workspace == "worktree":
            try:  # refused before anything is spawned or a job is started
                find_repository(caller.cwd)
            except WorkspaceError as exc:
                return ToolResult(text=str(exc), is_error=True)
        if arguments.run_in_background:
            return self._background(request, arguments.description, caller)
        return await self._foreground(request, arguments.output_schema)

    async def _foreground(
        self, request: SubagentStartRequest, output_type: OutputType | None = None
    ) -> ToolResult:
        limits, workspace = self.config.limits, self.config.workspace_options
        end = await run_to_end(
            self.service,
            self.config.provider,
            request,
            "foreground",
            limits,
            self.labels,
            workspace,
            self.max_concurrent,
        )
        if isinstance(end, str):
            if killed():
                # The call was cancelled and the start's rollback failed (Codex then raises the
                # teardown line): the caller asked to stop, so it gets the cancellation.
                raise asyncio.CancelledError
            return ToolResult(text=end, is_error=True)
        if isinstance(end, Interrupted):
            raise end.error
        result, dispose = end.result, end.dispose
        value: dict[str, Any] = {
            "stop_reason": str(result.stop_reason),
            "diagnostic": result.diagnostic,
        }
        meta, changes = end.host_facts(), end.changes
        if end.limit is not None:
            value["limit"] = end.limit_field
            text = end.limit if dispose is None else f"{end.limit}; dispose failed: {dispose}"
            if result.text:
                text += "\nPartial output before the run ended:\n" + result.text
            return ToolResult(
                text=with_changes(text, changes), is_error=True, value=value, meta=meta
            )
        if result.stop_reason == StopReason.COMPLETED:
            if output_type is not None:
                try:  # the JSON matched the schema (the service checked it)
                    value["structured_output"] = as_output(output_type, result.structured_output)
                except ValueError as exc:
                    value["stop_reason"] = str(StopReason.ERROR)
                    text = f"{_HEADLINES[StopReason.ERROR]}\nDiagnostic: {exc}"
                    return ToolResult(text=text, is_error=True, value=value, meta=meta)
            if dispose is None:
                return ToolResult(text=with_changes(result.text, changes), value=value, meta=meta)
            text = f"subagent run completed; dispose failed: {dispose}\n{result.text}"
            return ToolResult(
                text=with_changes(text, changes), is_error=True, value=value, meta=meta
            )
        text = failure_text(result)
        if dispose is not None:
            first, sep, rest = text.partition("\n")
            text = f"{first}; dispose failed: {dispose}{sep}{rest}"
        return ToolResult(text=with_changes(text, changes), is_error=True, value=value, meta=meta)

    def _background(self, request: SubagentStartRequest, label: str, caller: Caller) -> ToolResult:
        try:
            # What the provider would refuse is refused here, before a job is queued, wherever
            # the job will run (a Ray worker rebuilds the provider from the same profile entry).
            self.service.check(self.config.provider, request)
        except SubagentError as exc:
            return ToolResult(text=str(exc), is_error=True)
        try:
            job_id = self.jobs.start("subagent", label, caller, self._work(request))
        except Exception as exc:
            from dsh.jobs.errors import JobError

            if isinstance(exc, JobError):
                return ToolResult(text=str(exc), is_error=True)
            raise
        return ToolResult(
            text=f"started background subagent job {job_id}", value={"job_id": job_id}
        )

    def _work(self, request: SubagentStartRequest) -> JobWork:
        """The job's work: a closure here, plain data for an executor that runs it elsewhere."""
        if self.jobs.executor.portable:
            if self.portable_provider is None:
                from dsh.jobs.errors import JobArgumentError

                raise JobArgumentError(
                    f'tool "{self.name}": its provider has no profile entry to send to the'
                    f" {self.jobs.executor.name} executor"
                )
            kind, config = self.portable_provider
            return portable_delegation(
                kind,
                config,
                request,
                self.config.limits,
                self.name,
                trace_carrier(),
                self.config.workspace_options,
                self.max_concurrent,
            )
        limits, labels, workspace = self.config.limits, self.labels, self.config.workspace_options
        concurrent = self.max_concurrent
        return lambda: background_outcome(
            self.service, self.config.provider, request, limits, labels, None, workspace, concurrent
        )

    def __repr__(self) -> str:
        return f"<SubagentTool {self.name} provider={self.config.provider!r}>"
