"""A delegation's arguments: one validated model behind the tool's input schema, ``dsh run``'s
per-delegation options and the start request.

- A field marked :data:`FOR_MODEL` is in the tool's input schema (what a model, ``dsh mcp``'s
  clients and the framework adapters send), generated from the field's type, constraints and
  description.
- A field with a :class:`~dsh.tool_subagent._model_options.CommandLine` marker is a ``dsh run``
  option.
- A field named like a :class:`~dsh.subagent.SubagentStartRequest` field fills that field when
  it is set; the service refuses it, naming the field, for a provider that cannot honour it.

Python callers may set any field (``SubagentTool.delegate``). So a per-delegation option is a
field here, the request field in ``dsh.subagent``, and each provider's mapping of it
(docs/architecture.md, "Change scenarios").
"""

from __future__ import annotations

from dataclasses import fields
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema

from dsh.subagent import Parent, SubagentStartRequest, TextBlock
from dsh.tool_subagent._contract import Caller
from dsh.tool_subagent._model_options import CommandLine
from dsh.tool_subagent._output_schema import checked_schema, read_schema_file, schema_json

__all__ = ["FOR_MODEL", "DelegationArguments"]


class _ForModel:
    def __repr__(self) -> str:
        return "FOR_MODEL"


#: The marker of a field the model sees in the tool's input schema.
FOR_MODEL: Final = _ForModel()

# Filled from other fields: the prompt's text becomes its one block, the description the label.
_BUILT_HERE = frozenset({"prompt", "parent", "label", "max_depth"})
_REQUEST_FIELDS = frozenset(f.name for f in fields(SubagentStartRequest)) - _BUILT_HERE


class DelegationArguments(BaseModel):
    """The arguments of one delegation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    description: Annotated[
        str, FOR_MODEL, Field(min_length=1, description="A short 3-5 word label for the task.")
    ]
    prompt: Annotated[
        str,
        FOR_MODEL,
        Field(min_length=1, description="The complete, self-contained task for the subagent."),
    ]
    run_in_background: Annotated[
        bool,
        FOR_MODEL,
        Field(description="Return a job id at once instead of waiting (default false)."),
    ] = False
    #: The answer's JSON Schema (caller-only: a tool's fixed schema is its ``output_schema``
    #: setting): JSON Schema data, or a pydantic model class whose instance comes back.
    output_schema: Annotated[
        dict[str, Any] | type[BaseModel] | None,
        AfterValidator(checked_schema),
        WithJsonSchema({"type": "object"}),
        CommandLine(
            "--output-schema",
            "the answer must be JSON matching the JSON Schema in FILE; prints it compact",
            "FILE",
            read_schema_file,
        ),
    ] = None

    @classmethod
    def input_schema(cls, *, background: bool) -> dict[str, Any]:
        """The model-visible fields as a flat JSON object schema; ``background``: offer
        ``run_in_background`` (a tool that disables it does not show it)."""
        generated = cls.model_json_schema()["properties"]
        properties: dict[str, Any] = {}
        for name, info in cls.model_fields.items():
            if FOR_MODEL not in info.metadata or (name == "run_in_background" and not background):
                continue
            spec = dict(generated[name])
            branches = spec.pop("anyOf", None)
            if branches is not None:  # an optional field: absent means unset, null is not sent
                (kept,) = [b for b in branches if b != {"type": "null"}]
                spec.update(kept)
            spec.pop("title", None)
            spec.pop("default", None)  # each description states its default
            properties[name] = spec
        return {
            "type": "object",
            "properties": properties,
            "required": [n for n, i in cls.model_fields.items() if i.is_required()],
            "additionalProperties": False,
        }

    def request(self, caller: Caller, max_depth: int | None) -> SubagentStartRequest:
        """The start request: the prompt as one text block, the description as its label, and
        every set field that names a request field."""
        extra = {
            name: value
            for name in sorted(_REQUEST_FIELDS & set(type(self).model_fields))
            if (value := getattr(self, name)) is not None
        }
        if self.output_schema is not None:  # a model class is sent as its JSON Schema
            extra["output_schema"] = schema_json(self.output_schema)
        return SubagentStartRequest(
            prompt=(TextBlock(self.prompt),),
            parent=Parent(session_id=caller.session_id, cwd=caller.cwd),
            label=self.description,
            max_depth=max_depth,
            **extra,
        )
