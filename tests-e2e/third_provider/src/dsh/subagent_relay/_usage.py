"""Reads the agent's ``usage`` report into ``UsageFacts``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh.subagent.kit import UsageFacts, non_negative_int

__all__ = ["usage_from_report"]


def usage_from_report(report: Any) -> UsageFacts | None:
    """The run's token counts as the agent reported them (one model request per run)."""
    if not isinstance(report, Mapping):
        return None
    return UsageFacts(
        input_tokens=non_negative_int(report, "input_tokens"),
        output_tokens=non_negative_int(report, "output_tokens"),
        model_requests=1,
    )
