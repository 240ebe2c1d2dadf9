"""The tool contract's one home: the result type, :class:`ToolBase`, validation and export.

Every model-visible tool of the stack (the job tools here, the delegation tool in
``dsh.tool_subagent``) subclasses :class:`ToolBase`, which supplies the schema, the argument
check and the OpenAI/Anthropic exporters. It lives in ``dsh.jobs``, the lower of the two layers,
so ``dsh.jobs`` never imports the layer above it; ``dsh.tool_subagent`` re-exports these names
and owns the ``Tool`` protocol (this contract plus its ``Caller`` type).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

__all__ = [
    "SchemaTool",
    "ToolBase",
    "ToolResult",
    "to_anthropic_tool",
    "to_openai_tool",
    "validate_arguments",
]


@dataclass(frozen=True, slots=True)
class ToolResult:
    """One tool call's outcome. ``text`` is what a model sees; ``value`` is structured data."""

    text: str
    is_error: bool = False
    value: dict[str, Any] | None = None
    meta: dict[str, Any] | None = field(default=None, compare=False)
    """Host-only facts (e.g. ``{"usage": ...}``): never shown to a model, and not part of a
    result's equality, which is about what the model sees."""


class SchemaTool(Protocol):
    """The schema-bearing half of the ``Tool`` protocol (enough to export a tool)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def input_schema(self) -> dict[str, Any]: ...


CallerT = TypeVar("CallerT")


class ToolBase(Generic[CallerT]):
    """A model-visible tool: ``name``, ``description``, a JSON Schema and ``async call``.

    ``call`` checks the arguments against the schema (an ``is_error`` result naming the field)
    before :meth:`_call` runs. ``CallerT`` is the caller type the tool accepts: the job tools take
    any job owner, the delegation tool a ``dsh.tool_subagent.Caller``.
    """

    name: str
    description: str
    # How the tool behaves, as MCP's hint names without the ``_hint`` suffix (``read_only``,
    # ``destructive``, ``idempotent``, ``open_world``) mapped to a bool; the MCP layer turns
    # them into annotations. Plain data, so this layer never imports ``mcp``. None: unknown.
    behaviour_hints: ClassVar[Mapping[str, bool] | None] = None
    # True for the job control tools: the harness lists them apart from delegations.
    is_job_tool: ClassVar[bool] = False

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self._schema: dict[str, Any] = copy.deepcopy(dict(schema))

    def may_run_long(self, arguments: Mapping[str, Any]) -> bool:
        """Whether a call with ``arguments`` may wait on work (a product run); a server shows
        progress for such calls. A job tool answers at once unless it says otherwise."""
        return not self.is_job_tool

    @property
    def input_schema(self) -> dict[str, Any]:
        """A copy of the schema (a caller that edits it changes no tool)."""
        return copy.deepcopy(self._schema)

    def to_openai_tool(self) -> dict[str, Any]:
        return to_openai_tool(self)

    def to_anthropic_tool(self) -> dict[str, Any]:
        return to_anthropic_tool(self)

    async def call(self, arguments: Mapping[str, Any], caller: CallerT) -> ToolResult:
        problem = validate_arguments(self._schema, arguments)
        if problem is not None:
            return ToolResult(text=problem, is_error=True)
        return await self._call(arguments, caller)

    async def _call(self, arguments: Mapping[str, Any], caller: CallerT) -> ToolResult:
        """The tool's work, on arguments that passed the schema check."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def to_openai_tool(tool: SchemaTool) -> dict[str, Any]:
    """The OpenAI function-calling form (``tools=[...]`` of Chat Completions)."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.input_schema,
        },
    }


def to_anthropic_tool(tool: SchemaTool) -> dict[str, Any]:
    """The Anthropic Messages API form (``tools=[...]``)."""
    return {"name": tool.name, "description": tool.description, "input_schema": tool.input_schema}


_TYPE_WORDS = {
    "string": "a string",
    "boolean": "a boolean",
    "number": "a number",
    "integer": "an integer",
    "object": "an object",
    "array": "an array",
}


def _has_type(value: object, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in ("number", "integer"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        return kind == "number" or isinstance(value, int) or float(value).is_integer()
    if kind == "object":
        return isinstance(value, Mapping)
    if kind == "array":
        return isinstance(value, list | tuple)
    return True


def _check_field(name: str, value: object, spec: Mapping[str, Any]) -> str | None:
    kind = spec.get("type")
    if isinstance(kind, str) and not _has_type(value, kind):
        return f'field "{name}" must be {_TYPE_WORDS.get(kind, kind)}'
    if isinstance(value, str):
        min_length = spec.get("minLength")
        if isinstance(min_length, int) and len(value.strip()) < min_length:
            if min_length == 1:
                return f'field "{name}" must be a non-empty string'
            return f'field "{name}" must be at least {min_length} characters'
    if isinstance(value, int | float) and not isinstance(value, bool):
        low = spec.get("exclusiveMinimum")
        if isinstance(low, int | float) and not value > low:
            return f'field "{name}" must be greater than {low}'
        low = spec.get("minimum")
        if isinstance(low, int | float) and not value >= low:
            return f'field "{name}" must be at least {low}'
    return None


def validate_arguments(schema: Mapping[str, Any], arguments: object) -> str | None:
    """Check ``arguments`` against a flat object schema; return a safe error naming the field.

    Checks, in order: the arguments are an object; no unknown field (when
    ``additionalProperties`` is false); no missing required field; each field's type and bounds.
    Returns ``None`` when the arguments are valid.
    """
    if not isinstance(arguments, Mapping):
        return "invalid arguments: expected an object"
    properties: Mapping[str, Any] = schema.get("properties", {})
    if schema.get("additionalProperties") is False:
        unknown = sorted(str(key) for key in arguments if key not in properties)
        if unknown:
            return f'invalid arguments: unknown field "{unknown[0]}"'
    for name in schema.get("required", ()):
        if name not in arguments:
            return f'invalid arguments: missing required field "{name}"'
    for name, spec in properties.items():
        if name in arguments:
            problem = _check_field(name, arguments[name], spec)
            if problem is not None:
                return f"invalid arguments: {problem}"
    return None
