"""Command-line options generated from a pydantic model's fields.

A field that carries a :class:`CommandLine` marker in its ``Annotated`` metadata becomes a
``dsh run`` option. The option's text is read with the marker's ``read`` and validated with the
field's own type and constraints, so the command line refuses what the model refuses, naming
the option, before anything starts. Both :class:`~dsh.tool_subagent.SubagentToolConfig` (a
per-tool setting overridden for one run) and ``DelegationArguments`` (a per-delegation option)
declare their options this way: adding a field with a marker adds the option.
"""

from __future__ import annotations

import argparse
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Annotated, Any, NamedTuple

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

__all__ = ["CommandLine", "add_model_options", "model_options"]


class CommandLine(NamedTuple):
    """The ``dsh run`` option of a model field."""

    flag: str
    help: str
    metavar: str | None = None
    #: Turns the option's text into the field's input (a file's JSON, a number); a
    #: ``ValueError`` or ``OSError`` it raises is a usage error naming the option.
    read: Callable[[str], Any] = str


def _marked(model: type[BaseModel]) -> Iterator[tuple[str, FieldInfo, CommandLine]]:
    for name, info in model.model_fields.items():
        for item in info.metadata:
            if isinstance(item, CommandLine):
                yield name, info, item


def _choices(info: FieldInfo) -> tuple[Any, ...] | None:
    if typing.get_origin(info.annotation) is typing.Literal:
        return typing.get_args(info.annotation)
    return None


def _reader(name: str, info: FieldInfo, marker: CommandLine) -> Callable[[str], Any]:
    field_type: Any = Annotated[info.annotation, *info.metadata]  # the type and its constraints
    checker: TypeAdapter[Any] = TypeAdapter(field_type)

    def read(text: str) -> Any:
        try:
            return checker.validate_python(marker.read(text))
        except (ValueError, OSError) as exc:  # ValidationError is a ValueError
            if isinstance(exc, ValidationError):  # a validator's own line, else pydantic's
                problem = exc.errors()[0]["msg"].removeprefix("Value error, ")
            else:
                problem = str(exc) or type(exc).__name__
            raise argparse.ArgumentTypeError(f"{problem} (given {text!r})") from None

    read.__name__ = name  # argparse names the type in its "invalid <type> value" line
    return read


def add_model_options(parser: argparse.ArgumentParser, model: type[BaseModel]) -> None:
    """Add one option for each field of ``model`` that has a :class:`CommandLine` marker.

    Each option's ``dest`` is the field name and its default ``None`` (not given).
    """
    for name, info, marker in _marked(model):
        choices = _choices(info)
        if choices is not None:
            parser.add_argument(marker.flag, dest=name, choices=choices, help=marker.help)
        else:
            parser.add_argument(
                marker.flag,
                dest=name,
                type=_reader(name, info, marker),
                metavar=marker.metavar,
                help=marker.help,
            )


def model_options(args: argparse.Namespace, model: type[BaseModel]) -> Mapping[str, Any]:
    """The values of ``model``'s options given on the command line, by field name."""
    return {
        name: value
        for name, _info, _marker in _marked(model)
        if (value := getattr(args, name, None)) is not None
    }
