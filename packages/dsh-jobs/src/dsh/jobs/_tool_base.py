"""The tool result type, argument validation and schema export shared by every dsh tool.

``dsh.tool_subagent`` re-exports :class:`ToolResult` (the same class), so job tools and the
delegation tool return one type while ``dsh.jobs`` never imports the layer above it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "SchemaTool",
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


class SchemaTool(Protocol):
    """The schema-bearing half of the ``Tool`` protocol (enough to export a tool)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def input_schema(self) -> dict[str, Any]: ...


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
