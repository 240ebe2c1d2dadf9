"""Output schemas: a request's schema checked before anything starts, and the answer checked
against it after, whatever the product claims.

The schema is checked with ``jsonschema`` (its meta-schema: ``$schema`` when the schema names
one, else draft 2020-12) and bounded in size: Claude Code receives it as one command-line
argument (``--json-schema``), which Linux caps at 128 KiB. The answer is the run's final text
parsed as JSON (strictly: no ``NaN``), validated with the same library; the host gets the
parsed value (``SubagentResult.structured_output``) and the model-visible text becomes the
value as compact JSON. An answer that does not parse or match ends the run as a failure of the
fixed category ``structured-output``, never with the answer's text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from dsh.subagent._diagnostics import FailureFacts, failure_line
from dsh.subagent._types import StopReason, SubagentResult, TextBlock

__all__ = [
    "MAX_OUTPUT_SCHEMA_BYTES",
    "STRUCTURED_OUTPUT_CATEGORY",
    "check_output_schema",
    "compact_json",
    "structured_result",
]

MAX_OUTPUT_SCHEMA_BYTES: Final = 64 * 1024
"""The largest output schema accepted, in UTF-8 bytes of its compact JSON."""

STRUCTURED_OUTPUT_CATEGORY: Final = "structured-output"
"""The failure category of a run that ended without a value matching its output schema."""

_PROBLEM_CHARS = 200


def compact_json(value: Any) -> str:
    """``value`` as compact JSON text (no spaces, non-ASCII kept)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def check_output_schema(schema: object) -> None:
    """Raise ``ValueError`` (its text a clause about ``output_schema``) unless ``schema`` is a
    JSON object that is a valid JSON Schema of at most :data:`MAX_OUTPUT_SCHEMA_BYTES`."""
    if not isinstance(schema, Mapping):
        raise ValueError(f"must be a JSON Schema object, not {type(schema).__name__}")
    try:
        size = len(compact_json(schema).encode("utf-8"))
    except (TypeError, ValueError):
        raise ValueError("must hold JSON values only") from None
    if size > MAX_OUTPUT_SCHEMA_BYTES:
        raise ValueError(f"is {size} bytes as JSON; the limit is {MAX_OUTPUT_SCHEMA_BYTES}")
    # jsonschema is imported here, where a schema is checked: most runs have none, and its
    # import is a large part of `dsh run`'s start-up (docs/performance.md, "Start-up").
    from jsonschema import exceptions as schema_errors
    from jsonschema import validators

    cls: Any = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except schema_errors.SchemaError as exc:
        where = "/".join(str(part) for part in exc.absolute_path)
        message = exc.message[:_PROBLEM_CHARS]
        raise ValueError(
            f"is not a valid JSON Schema (at /{where}: {message})"
            if where
            else f"is not a valid JSON Schema ({message})"
        ) from None


def _matching_value(schema: Mapping[str, Any], text: str) -> tuple[bool, Any]:
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError:
        return (False, None)
    from jsonschema import validators

    cls: Any = validators.validator_for(schema, default=validators.Draft202012Validator)
    return (bool(cls(schema).is_valid(value)), value)


def structured_result(
    result: SubagentResult, schema: Mapping[str, Any], product: str
) -> SubagentResult:
    """A completed ``result`` checked against ``schema``: the parsed value with the compact JSON
    as its text, or an ``error`` of category ``structured-output`` (stage ``output``). Any other
    result is returned as it is."""
    if result.stop_reason != StopReason.COMPLETED:
        return result
    matches, value = _matching_value(schema, result.text)
    if not matches:
        facts = FailureFacts(product, "output", STRUCTURED_OUTPUT_CATEGORY)
        return SubagentResult(StopReason.ERROR, (), failure_line(facts))
    return SubagentResult(
        StopReason.COMPLETED, (TextBlock(compact_json(value)),), structured_output=value
    )
