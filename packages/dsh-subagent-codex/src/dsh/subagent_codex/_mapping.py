"""Pure tables: mode fields, the failure mapping, answer phases and unattended answers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from dsh.subagent import ResolvedStartRequest

__all__ = [
    "ANSWERED_REQUESTS",
    "MODE_FIELDS",
    "OBJECT_VARIANTS",
    "OPT_OUT_NOTIFICATIONS",
    "STRING_VARIANTS",
    "answer_request",
    "classify_error_info",
    "fact_line",
    "turn_start_params",
]

PRODUCT: Final = "Codex"
PREFIX: Final = "subagent-codex"

MODE_FIELDS: Final[Mapping[str, Mapping[str, str]]] = {
    "never": {"approvalPolicy": "never"},
    "approve-for-me": {
        "approvalPolicy": "on-request",
        "approvalsReviewer": "auto_review",
        "sandbox": "workspace-write",
    },
    "dangerously-bypass-approvals-and-sandbox": {
        "approvalPolicy": "never",
        "sandbox": "danger-full-access",
    },
}

#: Notifications we never read; Codex stops sending them (less parsing per turn). The streaming
#: deltas (model text, reasoning, command output) are kept: each one moves the run's activity
#: stamp, so a model that is still answering or a command that is still printing is not taken
#: for a stall by the caller's ``stall_timeout_s`` (docs/liveness.md). ``thread/tokenUsage/updated``
#: and ``account/rateLimits/updated`` are kept too: they carry the run's usage and rate-limit
#: facts (issues 26 and 39).
OPT_OUT_NOTIFICATIONS: Final[tuple[str, ...]] = ()

STRING_VARIANTS: Final = frozenset(
    {
        "contextWindowExceeded",
        "sessionBudgetExceeded",
        "usageLimitExceeded",
        "rateLimitExceeded",
        "flexUnavailable",
        "serverOverloaded",
        "cyberPolicy",
        "misalignmentPolicyViolation",
        "tooManyDenials",
        "internalServerError",
        "unauthorized",
        "badRequest",
        "threadRollbackFailed",
        "sandboxError",
        "other",
    }
)
_HTTP_VARIANTS: Final = frozenset(
    {
        "httpConnectionFailed",
        "responseStreamConnectionFailed",
        "responseStreamDisconnected",
        "responseTooManyFailedAttempts",
    }
)
OBJECT_VARIANTS: Final = _HTTP_VARIANTS | {"activeTurnNotSteerable"}


def classify_error_info(info: Any) -> tuple[str, int | None]:
    """``codexErrorInfo`` → ``(category, http_status)``; anything unexpected is ``unknown``."""
    if isinstance(info, str):
        return (info, None) if info in STRING_VARIANTS else ("unknown", None)
    if not isinstance(info, dict) or len(info) != 1:
        return ("unknown", None)
    ((key, value),) = info.items()
    if key not in OBJECT_VARIANTS or not isinstance(value, dict):
        return ("unknown", None)
    status = value.get("httpStatusCode") if key in _HTTP_VARIANTS else None
    if isinstance(status, bool) or not isinstance(status, int) or not 0 <= status <= 65535:
        status = None
    return (key, status)


_NO_APPROVAL = "the provider does not grant interactive approval"
#: method → (fact request, fixed result or None for the decision rule, decision, reason)
ANSWERED_REQUESTS: Final[Mapping[str, tuple[str, dict[str, Any] | None, str, str]]] = {
    "item/commandExecution/requestApproval": ("command approval", None, "", _NO_APPROVAL),
    "item/fileChange/requestApproval": ("file approval", None, "", _NO_APPROVAL),
    "item/permissions/requestApproval": (
        "permission grant",
        {"permissions": {}, "scope": "turn"},
        "denied",
        "the provider grants no additional turn permissions",
    ),
    "item/tool/requestUserInput": (
        "user input",
        {"answers": {}},
        "empty response",
        "the provider does not collect interactive answers",
    ),
    "mcpServer/elicitation/request": (
        "MCP elicitation",
        {"action": "decline", "content": None, "_meta": None},
        "declined",
        "the provider does not collect interactive MCP input",
    ),
}


def answer_request(method: str, params: Mapping[str, Any]) -> tuple[dict[str, Any], str, str, str]:
    """The unattended answer: ``(result, fact request, decision, reason)``.

    Raises ``LookupError`` for a method we do not answer and ``ValueError`` for an
    ``availableDecisions`` list that offers neither ``cancel`` nor ``decline``.
    """
    request, fixed, decision, reason = ANSWERED_REQUESTS[method]
    if fixed is not None:
        return (dict(fixed), request, decision, reason)
    offered = params.get("availableDecisions")
    if offered is None:
        return ({"decision": "decline"}, request, "declined", reason)
    if isinstance(offered, list) and "cancel" in offered:
        return ({"decision": "cancel"}, request, "cancelled", reason)
    if isinstance(offered, list) and "decline" in offered:
        return ({"decision": "decline"}, request, "declined", reason)
    raise ValueError("availableDecisions offers neither cancel nor decline")


def fact_line(mode: str, request: str, decision: str, reason: str) -> str:
    return (
        f"Codex unattended decision (mode: {mode}; request: {request}; decision: {decision}): "
        f"{reason}"
    )


DECLINED_ITEMS: Final[Mapping[str, tuple[str, str]]] = {
    "commandExecution": ("command execution", "the command"),
    "fileChange": ("file change", "the file change"),
}


def turn_start_params(thread_id: str | None, request: ResolvedStartRequest) -> dict[str, Any]:
    """The ``turn/start`` params of a checked request: where a request field becomes Codex's.

    ``output_schema`` is ``outputSchema``, which Codex sends to the model as a strict
    ``json_schema`` text format; the final message's text is the JSON (checked by the service).
    """
    params: dict[str, Any] = {
        "threadId": thread_id,
        "input": [{"type": "text", "text": text, "text_elements": []} for text in request.texts],
    }
    if request.output_schema is not None:
        params["outputSchema"] = dict(request.output_schema)
    return params
