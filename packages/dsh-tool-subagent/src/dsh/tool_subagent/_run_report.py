"""What one ``dsh run`` ended with, as ``--json`` prints it.

The record holds only model-visible text (the answer, or the safe failure text) and the safe
diagnostic line, never raw product output, so it is as safe to log as the plain output is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:  # a plain `dsh run --json` does not import the job stack
    from dsh.jobs import JobSnapshot
    from dsh.jobs.tools import ToolResult

__all__ = ["RunReport", "from_job", "from_tool_result", "timed_out"]

_DIAGNOSTIC, _DISPOSE = "diagnostic: ", "; dispose failed: "


@dataclass(frozen=True, slots=True)
class RunReport:
    """``stop_reason`` is the result's (``completed``, ``error``, ...) or ``timeout``.

    ``facts`` are the run's host-only facts, each printed under its own key beside the fields
    (docs/cli.md): ``usage`` (``UsageFacts.as_json``, rate limits included), ``timings``
    (``RunTimings.as_json``), ``workspace`` (a worktree run's changes), ``queue`` (the fair
    queue's place, order and wait), ``structured_output`` (the answer's JSON value, checked
    against ``--output-schema``; ``text`` is the same JSON). A fact the run did not produce is
    left out. A new host fact in the tool result's or the job's ``meta`` is printed with no
    change here.
    """

    stop_reason: str
    text: str
    diagnostic: str | None
    job_id: str | None
    elapsed_s: float
    exit_code: int
    facts: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "facts"}
        data["elapsed_s"] = round(self.elapsed_s, 3)
        data.update({k: v for k, v in self.facts.items() if v is not None and k not in data})
        return data

    def write_json(self, out: TextIO) -> None:
        out.write(json.dumps(self.to_json(), ensure_ascii=False) + "\n")


def from_tool_result(result: ToolResult, elapsed_s: float, exit_code: int) -> RunReport:
    """A foreground call: the tool's value carries the stop reason and the diagnostic."""
    value = result.value or {}
    stop_reason = str(value.get("stop_reason") or ("error" if result.is_error else "completed"))
    diagnostic = value.get("diagnostic")
    facts = {**(result.meta or {}), "structured_output": value.get("structured_output")}
    return RunReport(
        stop_reason,
        result.text,
        diagnostic if diagnostic else None,
        None,
        elapsed_s,
        exit_code,
        facts,
    )


def _job_stop_reason(snapshot: JobSnapshot) -> tuple[str, str | None]:
    """The run's stop reason and diagnostic, from the job status and its detail line.

    The detail of a failed subagent job is ``<stop reason>[; diagnostic: <line>][; ...]``
    (``dsh.tool_subagent._tool``), so both parts are read back from it.
    """
    from dsh.jobs import JobStatus

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
    return RunReport(
        stop_reason, output, diagnostic, snapshot.id, elapsed_s, exit_code, snapshot.meta or {}
    )


def timed_out(limit_s: float, elapsed_s: float, exit_code: int) -> RunReport:
    """``--timeout`` cancelled the run (its tree had exited before this is written)."""
    text = f"dsh run: cancelled after the --timeout of {limit_s:g} s"
    return RunReport("timeout", text, None, None, elapsed_s, exit_code)
