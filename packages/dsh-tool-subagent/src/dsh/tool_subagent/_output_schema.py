"""A delegation's output schema as the tool layer takes it: inline, a JSON file, or a pydantic
model class, checked before anything starts (docs/structured-output.md).

The seam checks the schema again at the start (``SubagentService.check``) and checks the answer
against it (``SubagentResult.structured_output``); here the schema is only read and refused early,
naming the field: a profile's ``[[tool]] output_schema``, ``dsh run --output-schema FILE``, or a
Python caller's ``DelegationArguments.output_schema``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError, ValidationInfo

from dsh.subagent import MAX_OUTPUT_SCHEMA_BYTES, check_output_schema

__all__ = [
    "PROFILE_DIR",
    "OutputType",
    "as_output",
    "checked_schema",
    "read_schema_file",
    "schema_json",
    "tool_schema",
]

#: The validation-context key of the directory a profile file's relative paths start from.
PROFILE_DIR = "profile_dir"

#: A schema as a Python caller may give it: JSON Schema data, or a pydantic model class.
OutputType = Mapping[str, Any] | type[BaseModel]


def read_schema_file(path: str | os.PathLike[str]) -> Any:
    """The JSON of a schema file (``ValueError`` or ``OSError`` when it cannot be read)."""
    file = Path(path)
    if file.stat().st_size > MAX_OUTPUT_SCHEMA_BYTES * 8:  # far beyond the limit on its JSON
        raise ValueError(f"the schema file is over {MAX_OUTPUT_SCHEMA_BYTES * 8} bytes")
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"the schema file is not JSON ({exc.msg}, line {exc.lineno})") from None


def schema_json(schema: OutputType) -> dict[str, Any]:
    """The JSON Schema of ``schema``: a model class's ``model_json_schema()``, else a copy."""
    if isinstance(schema, type):
        return schema.model_json_schema()
    return dict(schema)


def checked_schema(schema: Any) -> Any:
    """``schema`` when it is a model class or a valid JSON Schema object within the size limit;
    a ``ValueError`` naming what is wrong otherwise (pydantic names the field)."""
    if isinstance(schema, type):
        if not issubclass(schema, BaseModel):
            raise ValueError("the output schema must be JSON Schema data or a pydantic model class")
        data: Any = schema.model_json_schema()
    else:
        data = schema
    try:
        check_output_schema(data)
    except ValueError as exc:
        raise ValueError(f"the output schema {exc}") from None
    return schema


def tool_schema(value: Any, info: ValidationInfo) -> Any:
    """A ``[[tool]] output_schema``: an inline table as it is, a string as the path of a JSON
    file (relative to the profile file's directory, else the working directory)."""
    if not isinstance(value, str):
        return value
    base = (info.context or {}).get(PROFILE_DIR)
    path = Path(base, value) if base is not None else Path(value)
    try:
        return read_schema_file(path)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ValueError(f"cannot read the schema file {value!r}: {reason}") from None


def as_output(schema: OutputType, value: Any) -> Any:
    """The answer as the caller asked for it: a model class's instance, else the JSON value.

    Raises ``ValueError`` when the JSON matched the schema but the model refuses it (a
    validator of its own)."""
    if isinstance(schema, type):
        try:
            return schema.model_validate(value)
        except ValidationError:
            raise ValueError(f"the answer does not validate as {schema.__name__}") from None
    return value
