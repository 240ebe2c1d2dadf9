"""The ``Tool`` protocol and ``Caller``: what a harness author types model-visible tools as.

The implementation half of the contract (``ToolResult``, ``ToolBase`` with the schema check and
the exporters) lives in ``dsh.jobs.tools``, below this layer, so the job tools can share it
without importing ``dsh.tool_subagent``. This module adds only what names the caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from dsh.jobs.tools import SchemaTool, ToolResult

__all__ = ["Caller", "Tool"]


@dataclass(frozen=True, slots=True)
class Caller:
    """The calling agent session; the owner of the Jobs it starts."""

    session_id: str
    cwd: str | None = None


@runtime_checkable
class Tool(SchemaTool, Protocol):
    """A model-visible tool; ``input_schema`` is JSON Schema (``additionalProperties: false``).

    Every dsh tool is a ``dsh.jobs.tools.ToolBase``; this protocol is the structural view of one.
    """

    async def call(self, arguments: Mapping[str, Any], caller: Caller) -> ToolResult: ...
