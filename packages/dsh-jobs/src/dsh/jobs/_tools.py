"""The model-visible job tools: ``job_output``, ``job_list`` and ``job_kill``.

Each is a :class:`~dsh.jobs._tool_base.ToolBase` and so satisfies ``dsh.tool_subagent.Tool``
structurally, without importing that package.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from dsh.jobs._registry import JobRegistry
from dsh.jobs._tool_base import ToolBase, ToolResult
from dsh.jobs._types import JobOwner, JobSnapshot
from dsh.jobs.errors import JobError

__all__ = [
    "JOB_LIST_FINISHED_LINES",
    "JOB_TOOLS_GUIDE",
    "JOB_TOOL_NAMES",
    "JobKillTool",
    "JobListTool",
    "JobOutputTool",
    "job_tools",
]

#: ``job_list`` shows every live job of the owner (at most its admission limit) and this many of
#: its newest finished ones, then one line saying how many more there are.
JOB_LIST_FINISHED_LINES = 10

_JOB_ID = {
    "type": "string",
    "minLength": 1,
    "description": "The id returned when the job was started, e.g. subagent-3f9a0c12be47.",
}


def _snapshot_value(snapshot: JobSnapshot) -> dict[str, Any]:
    return {
        "job_id": snapshot.id,
        "kind": snapshot.kind,
        "label": snapshot.label,
        "status": str(snapshot.status),
        "detail": snapshot.detail,
    }


class _JobTool(ToolBase[JobOwner | None]):
    """A job tool bound to one registry; a registry error becomes an ``is_error`` result."""

    _SCHEMA: ClassVar[dict[str, Any]]
    is_job_tool: ClassVar[bool] = True
    #: This tool's part of the sentence that tells the model how to use the job tools.
    guide: ClassVar[str]
    # job_list and job_output only read (so hosts may run them without asking).
    behaviour_hints: ClassVar[Mapping[str, bool] | None] = {"read_only": True, "open_world": False}

    def __init__(self, registry: JobRegistry) -> None:
        super().__init__(self._SCHEMA)
        self.registry = registry

    async def call(self, arguments: Mapping[str, Any], caller: JobOwner | None) -> ToolResult:
        try:
            return await super().call(arguments, caller)
        except JobError as exc:
            return ToolResult(text=str(exc), is_error=True)


class JobOutputTool(_JobTool):
    name = "job_output"
    guide = f"read the output with {name} (wait: true blocks until it finishes)"
    description = (
        "Read a background job's output and status. The reply is the job's output (or "
        '"(no new output)" while it has none) and always ends with a line [status: ...]. '
        "A read does not block unless wait: true, which waits until the job finishes or "
        "timeout_ms passes; a timeout is not an error, just read again later."
    )
    _SCHEMA: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "job_id": _JOB_ID,
            "wait": {
                "type": "boolean",
                "description": "Wait for the job to finish before replying (default false).",
            },
            "timeout_ms": {
                "type": "number",
                "exclusiveMinimum": 0,
                "description": "How long wait: true may wait, in milliseconds (capped).",
            },
        },
        "required": ["job_id"],
        "additionalProperties": False,
    }

    def may_run_long(self, arguments: Mapping[str, Any]) -> bool:
        return arguments.get("wait") is True

    async def _call(self, arguments: Mapping[str, Any], caller: JobOwner | None) -> ToolResult:
        job_id: str = arguments["job_id"]
        registry = self.registry
        if arguments.get("wait", False):
            config = registry.config
            requested = arguments.get("timeout_ms") or config.wait_timeout_ms
            timeout_ms = min(float(requested), config.max_wait_timeout_ms)
            snapshot = await registry.wait(job_id, timeout_ms / 1000.0, caller)
        else:
            snapshot = registry.get(job_id, caller)
        output = registry.read(job_id, caller) if snapshot.terminal else ""
        value = _snapshot_value(snapshot)
        value["output"] = output
        text = f"{output or '(no new output)'}\n{snapshot.status_line}"
        meta = dict(snapshot.meta) if snapshot.terminal and snapshot.meta else None
        return ToolResult(text=text, value=value, meta=meta)


class JobListTool(_JobTool):
    name = "job_list"
    guide = f"list jobs with {name}"
    description = (
        "List this session's background jobs, one per line: <id> [<kind>] <status> — <label>. "
        f"Running jobs come first, then the {JOB_LIST_FINISHED_LINES} most recently finished. "
        "Use job_output to read one."
    )
    _SCHEMA: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }

    async def _call(self, arguments: Mapping[str, Any], caller: JobOwner | None) -> ToolResult:
        overview = self.registry.overview(caller, JOB_LIST_FINISHED_LINES)
        shown = [*overview.live, *overview.finished]
        value = {"jobs": [_snapshot_value(s) for s in shown], "more_finished": overview.more}
        if not shown:
            return ToolResult(text="(no background jobs)", value=value)
        lines = [f"{s.id} [{s.kind}] {s.status} — {s.label}" for s in shown]
        if overview.more:
            lines.append(f"and {overview.more} more finished jobs")
        return ToolResult(text="\n".join(lines), value=value)


class JobKillTool(_JobTool):
    name = "job_kill"
    guide = f"stop one with {name}"
    # Stopping a job again changes nothing.
    behaviour_hints: ClassVar[Mapping[str, bool] | None] = {
        "read_only": False,
        "destructive": True,
        "idempotent": True,
        "open_world": False,
    }
    description = (
        "Stop a background job. Returns once the job's processes have exited and it has "
        "settled as killed (or, if that takes unusually long, while it is still stopping). "
        "A job that already finished is left as it was."
    )
    _SCHEMA: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "job_id": _JOB_ID,
            "reason": {"type": "string", "description": "Why the job is being stopped."},
        },
        "required": ["job_id"],
        "additionalProperties": False,
    }

    def may_run_long(self, arguments: Mapping[str, Any]) -> bool:
        return True  # it waits for the job's processes to exit

    async def _call(self, arguments: Mapping[str, Any], caller: JobOwner | None) -> ToolResult:
        job_id: str = arguments["job_id"]
        reason = arguments.get("reason") or None
        timeout_s = self.registry.config.kill_wait_ms / 1000.0
        result, snapshot = await self.registry.stop(job_id, caller, reason, timeout_s)
        value = _snapshot_value(snapshot)
        value["result"] = result
        if result == "already-finished":
            text = f"job {job_id} had already finished {snapshot.status_line}"
        elif snapshot.terminal:
            text = f"stopped job {job_id} {snapshot.status_line}"
        else:
            text = f"requested cancellation of job {job_id}; it is still stopping"
        return ToolResult(text=text, value=value)


_JOB_TOOLS = (JobOutputTool, JobListTool, JobKillTool)


JOB_TOOL_NAMES = tuple(tool.name for tool in _JOB_TOOLS)
#: How to use the job tools, one clause per tool, for a server's or an agent's instructions:
#: "read the output with job_output (...), list jobs with job_list and stop one with job_kill".
JOB_TOOLS_GUIDE = " and ".join(
    [", ".join(tool.guide for tool in _JOB_TOOLS[:-1]), _JOB_TOOLS[-1].guide]
)


def job_tools(registry: JobRegistry) -> tuple[JobOutputTool, JobListTool, JobKillTool]:
    """The three job tools bound to ``registry``, in the order job_output, job_list, job_kill."""
    return JobOutputTool(registry), JobListTool(registry), JobKillTool(registry)
