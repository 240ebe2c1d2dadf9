"""What one ``dsh run`` ended with, as ``--json`` prints it.

The record holds only model-visible text (the answer, or the safe failure text) and the safe
diagnostic line, never raw product output, so it is as safe to log as the plain output is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:  # a plain `dsh run --json` does not import the job stack
    from dsh.jobs import JobSnapshot
    from dsh.jobs.tools import ToolResult

__all__ = ["RunReport", "from_job", "from_tool_result", "timed_out"]

_DIAGNOSTIC, _DISPOSE = "diagnostic: ", "; dispose failed: "


@dataclass(frozen=True, slots=True)
class RunReport:
    """``stop_reason`` is the result's (``completed``, ``error``, ...) or ``timeout``."""

    stop_reason: str
    text: str
    diagnostic: str | None
    job_id: str | None
    elapsed_s: float
    exit_code: int
    usage: dict[str, Any] | None = None
    """The product's usage facts (host-only; ``UsageFacts.as_json``), when it reported any."""
    timings: dict[str, Any] | None = None
    """dsh's own stamps of the run (``RunTimings.as_json``), when it got as far as starting."""
    workspace: dict[str, Any] | None = None
    """A worktree run's changes (branch, commit, base, files, counts; ``Changes.as_json``)."""
    structured_output: Any = None
    """The answer's JSON value, checked against ``--output-schema`` (absent when the run had no
    schema, failed, or the value is ``null``: ``text`` is the same JSON)."""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["elapsed_s"] = round(self.elapsed_s, 3)
        for key in ("usage", "timings", "workspace", "structured_output"):
            if data[key] is None:
                del data[key]  # only a run that started (and was reported on) has them
        return data

    def write_json(self, out: TextIO) -> None:
        out.write(json.dumps(self.to_json(), ensure_ascii=False) + "\n")


def from_tool_result(result: ToolResult, elapsed_s: float, exit_code: int) -> RunReport:
    """A foreground call: the tool's value carries the stop reason and the diagnostic."""
    value = result.value or {}
    stop_reason = str(value.get("stop_reason") or ("error" if result.is_error else "completed"))
    diagnostic = value.get("diagnostic")
    usage, timings, workspace = _host_facts(result.meta)
    return RunReport(
        stop_reason,
        result.text,
        diagnostic if diagnostic else None,
        None,
        elapsed_s,
        exit_code,
        usage,
        timings,
        workspace,
        value.get("structured_output"),
    )


def _host_facts(meta: Mapping[str, Any] | None) -> tuple[Any, Any, Any]:
    """The ``usage``, ``timings`` and ``workspace`` of a tool result's or a job's host-only
    facts."""
    meta = meta or {}
    return meta.get("usage"), meta.get("timings"), meta.get("workspace")


def _job_stop_reason(snapshot: JobSnapshot) -> tuple[str, str | None]:
    from dsh.jobs import JobStatus

    """The run's stop reason and diagnostic, from the job status and its detail line.

    The detail of a failed subagent job is ``<stop reason>[; diagnostic: <line>][; ...]``
    (``dsh.tool_subagent._tool``), so both parts are read back from it.
    """
    if snapshot.status is JobStatus.COMPLETED:
        return "completed", None
    if snapshot.status is JobStatus.KILLED:
        return "aborted", None
    detail = snapshot.detail or "error"
    reason, _, rest = detail.partition("; ")
    if not rest.startswith(_DIAGNOSTIC):
        return reason, None
    return reason, rest.removeprefix(_DIAGNOSTIC).split(_DISPOSE, 1)[0]


def from_job(snapshot: JobSnapshot, output: str, elapsed_s: float, exit_code: int) -> RunReport:
    """A background job, read after it settled."""
    stop_reason, diagnostic = _job_stop_reason(snapshot)
    usage, timings, workspace = _host_facts(snapshot.meta)
    return RunReport(
        stop_reason,
        output,
        diagnostic,
        snapshot.id,
        elapsed_s,
        exit_code,
        usage,
        timings,
        workspace,
        (snapshot.meta or {}).get("structured_output"),
    )


def timed_out(limit_s: float, elapsed_s: float, exit_code: int) -> RunReport:
    """``--timeout`` cancelled the run (its tree had exited before this is written)."""
    text = f"dsh run: cancelled after the --timeout of {limit_s:g} s"
    return RunReport("timeout", text, None, None, elapsed_s, exit_code)
