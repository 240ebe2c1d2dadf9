"""Result mapping: strict success, the coarse category table, permission fact lines."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dsh.subagent import STRUCTURED_OUTPUT_CATEGORY, ResolvedStartRequest
from dsh.subagent.kit import FailureFacts, compact_json

if TYPE_CHECKING:  # the SDK is imported when a run starts, not when the provider is built
    from claude_agent_sdk import ResultMessage

__all__ = [
    "DENY_MESSAGE",
    "PREFIX",
    "PRODUCT",
    "category_of",
    "fact_line",
    "is_strict_success",
    "request_flags",
    "result_facts",
    "structured_answer",
]

PRODUCT = "Claude Code"
PREFIX = "subagent-claude-code"
DENY_MESSAGE = "This unattended Claude Code subagent cannot request human approval."

_SUBTYPE_CATEGORIES = {
    "error_max_turns": "turn-limit",
    "error_max_budget_usd": "budget-limit",
    "error_max_structured_output_retries": STRUCTURED_OUTPUT_CATEGORY,
    "error_during_execution": "execution",
}

REQUEST_TOOL = "tool permission"
REQUEST_ELICITATION = "MCP elicitation"
REQUEST_DIALOG = "user dialog"

REASON_CALLBACK = "the provider does not request human approval"
REASON_ELICITATION = "the provider does not collect interactive MCP input"
REASON_DIALOG = "the provider does not render blocking dialogs"
REASON_PRODUCT = "Claude Code denied the request before an interactive prompt"


@dataclass(frozen=True, slots=True)
class PermissionFact:
    request: str
    decision: str
    reason: str


def fact_line(mode: str, fact: PermissionFact) -> str:
    return (
        f"Claude Code unattended decision (mode: {mode}; request: {fact.request}; "
        f"decision: {fact.decision}): {fact.reason}"
    )


def is_strict_success(message: ResultMessage) -> bool:
    return (
        message.subtype == "success"
        and message.is_error is False
        and isinstance(message.result, str)
        and message.result.strip() != ""
    )


def _status(message: ResultMessage) -> int | None:
    status = message.api_error_status
    return status if isinstance(status, int) and not isinstance(status, bool) else None


def category_of(message: ResultMessage, assistant_error: str | None) -> str:
    """The coarse category of a non-success result (never its prose, subtype or errors)."""
    if message.subtype in _SUBTYPE_CATEGORIES:
        return _SUBTYPE_CATEGORIES[message.subtype]
    if message.subtype != "success":
        return "unknown"
    if not message.is_error:
        return "invalid-success"
    status = _status(message)
    if status is not None:
        if status in (401, 403):
            return "authentication"
        if status == 429:
            return "rate-limit"
        if 500 <= status <= 599:
            return "server"
        if 400 <= status <= 499:
            return "request"
        return "unknown"
    text = message.result if isinstance(message.result, str) else ""
    if assistant_error == "authentication_failed" or "not logged in" in text.lower():
        return "authentication"
    if message.terminal_reason == "api_error" or assistant_error is not None:
        return "connection"
    return "unknown"


def result_facts(message: ResultMessage, assistant_error: str | None) -> FailureFacts:
    return FailureFacts(
        product=PRODUCT,
        stage="query-run",
        category=category_of(message, assistant_error),
        http_status=_status(message),
    )


def request_flags(request: ResolvedStartRequest) -> list[str]:
    """The CLI flags a checked request adds to the launch: where a request field becomes
    Claude Code's (the prompt itself goes through the SDK's stream).

    ``output_schema`` is ``--json-schema <json>``, the flag the SDK's ``output_format``
    (``{"type": "json_schema", "schema": ...}``) becomes: the CLI adds its ``StructuredOutput``
    tool, which the model must call once at the end. ``max_cost_usd`` is ``--max-budget-usd``:
    the CLI ends the run itself past that figure.
    """
    flags: list[str] = []
    if request.output_schema is not None:
        flags += ["--json-schema", compact_json(request.output_schema)]
    if request.max_cost_usd is not None:
        flags += ["--max-budget-usd", f"{request.max_cost_usd:g}"]
    return flags


def structured_answer(message: ResultMessage) -> str | None:
    """The answer of a run with an output schema: the result's ``structured_output`` as compact
    JSON, or ``None`` when a successful result carries none (``structured-output``)."""
    if message.subtype != "success" or message.is_error is not False:
        return None
    if message.structured_output is None:
        return None
    try:
        return compact_json(message.structured_output)
    except (TypeError, ValueError):
        return None
