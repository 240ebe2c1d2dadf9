"""Relay's failure facts: the prefix, the product name and the category table."""

from __future__ import annotations

from typing import Any

from dsh.subagent.kit import FailureFacts

__all__ = ["PREFIX", "PRODUCT", "category_of", "error_facts"]

PRODUCT = "Relay"
PREFIX = "subagent-relay"

_STATUS_CATEGORIES = {401: "unauthorized", 403: "unauthorized", 429: "rate-limit"}


def category_of(status: int | None) -> str:
    """The coarse category of a model failure, from its HTTP status alone (never its text)."""
    if status is None:
        return "connection"
    if status in _STATUS_CATEGORIES:
        return _STATUS_CATEGORIES[status]
    if 500 <= status <= 599:
        return "server"
    if 400 <= status <= 499:
        return "request"
    return "unknown"


def error_facts(message: dict[str, Any]) -> FailureFacts:
    """The facts of the product's ``error`` line (its stage is looked up, never copied)."""
    status = message.get("status")
    if isinstance(status, bool) or not isinstance(status, int):
        status = None
    stage = "reply" if message.get("stage") == "reply" else "unknown"
    return FailureFacts(PRODUCT, stage, category_of(status), http_status=status)
