"""The arguments model: one field feeds the input schema, ``dsh run``'s options and the request."""

from __future__ import annotations

import argparse
from typing import Annotated, ClassVar

import pytest
from pydantic import Field

from dsh.jobs import JobRegistry
from dsh.subagent import Capabilities, SubagentService
from dsh.subagent.testing import FakeProvider
from dsh.tool_subagent import (
    Caller,
    DelegationArguments,
    SubagentTool,
    SubagentToolConfig,
    ToolResult,
)
from dsh.tool_subagent._arguments import FOR_MODEL
from dsh.tool_subagent._model_options import CommandLine, add_model_options, model_options

CALLER = Caller(session_id="s1", cwd="/tmp")


class WithPersona(DelegationArguments):
    """What a new per-delegation option is: one field (``persona`` is a request field)."""

    persona: Annotated[
        str | None,
        FOR_MODEL,
        CommandLine("--persona", "the subagent's persona", "NAME"),
        Field(min_length=1, description="Who the subagent is."),
    ] = None


class PersonaTool(SubagentTool):
    arguments_model: ClassVar[type[DelegationArguments]] = WithPersona


def mount(provider: FakeProvider, tool_class: type[SubagentTool] = SubagentTool) -> SubagentTool:
    service = SubagentService()
    service.register(provider)
    config = SubagentToolConfig(provider=provider.name, max_depth="provider-managed")
    return tool_class(config, service, JobRegistry())


def test_the_input_schema_is_the_model_visible_part_of_the_arguments_model() -> None:
    tool = mount(FakeProvider())
    assert tool.input_schema == {
        "type": "object",
        "properties": {
            "description": {
                "type": "string",
                "minLength": 1,
                "description": "A short 3-5 word label for the task.",
            },
            "prompt": {
                "type": "string",
                "minLength": 1,
                "description": "The complete, self-contained task for the subagent.",
            },
            "run_in_background": {
                "type": "boolean",
                "description": "Return a job id at once instead of waiting (default false).",
            },
        },
        "required": ["description", "prompt"],
        "additionalProperties": False,
    }


async def test_one_field_reaches_the_schema_the_command_line_and_the_providers_request() -> None:
    provider = FakeProvider(capabilities=Capabilities(persona=True))
    tool = mount(provider, PersonaTool)
    assert tool.input_schema["properties"]["persona"] == {
        "type": "string",
        "minLength": 1,
        "description": "Who the subagent is.",
    }
    parser = argparse.ArgumentParser()
    add_model_options(parser, WithPersona)
    assert model_options(parser.parse_args(["--persona", "reviewer"]), WithPersona) == {
        "persona": "reviewer"
    }
    assert model_options(parser.parse_args([]), WithPersona) == {}
    with pytest.raises(SystemExit):  # the field's own constraint, at parse time
        parser.parse_args(["--persona", ""])

    by_model = await tool.call({"description": "d", "prompt": "p", "persona": "reviewer"}, CALLER)
    by_python = await tool.delegate(
        WithPersona(description="d", prompt="p", persona="tester"), CALLER
    )
    assert not by_model.is_error
    assert not by_python.is_error
    assert [r.persona for r in provider.requests] == ["reviewer", "tester"]


async def test_a_field_the_provider_cannot_honour_is_refused_naming_it() -> None:
    provider = FakeProvider()
    tool = mount(provider, PersonaTool)
    result = await tool.call({"description": "d", "prompt": "p", "persona": "reviewer"}, CALLER)
    assert result == ToolResult(
        'subagent provider "fake" does not support the "persona" capability', True
    )
    assert provider.requests == []
    # Unset, it is not sent: the same tool works on the same provider.
    assert not (await tool.call({"description": "d", "prompt": "p"}, CALLER)).is_error


async def test_a_python_callers_bad_arguments_are_refused_naming_the_field() -> None:
    provider = FakeProvider()
    tool = mount(provider)
    empty = await tool.delegate({"description": "d", "prompt": ""}, CALLER)
    unknown = await tool.delegate({"description": "d", "prompt": "p", "model": "x"}, CALLER)
    assert empty.is_error
    assert empty.text.startswith('invalid arguments: field "prompt"')
    assert unknown.is_error
    assert unknown.text.startswith('invalid arguments: field "model"')
    assert provider.requests == []


def test_a_tool_setting_with_a_command_line_marker_is_a_dsh_run_option() -> None:
    parser = argparse.ArgumentParser()
    add_model_options(parser, SubagentToolConfig)
    args = parser.parse_args(["--stall-timeout", "2.5", "--workspace", "worktree"])
    assert model_options(args, SubagentToolConfig) == {
        "stall_timeout_s": 2.5,
        "workspace": "worktree",
    }
    for bad in (["--stall-timeout", "0"], ["--stall-timeout", "inf"], ["--workspace", "elsewhere"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)
