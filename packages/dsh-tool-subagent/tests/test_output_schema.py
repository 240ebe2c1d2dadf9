"""Output schemas on every tool-layer surface, with a provider that echoes its task.

The echo answers with the prompt's text, so a prompt of JSON is the answer the schema checks.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pydantic
import pytest

from dsh.jobs import JobStatus
from dsh.subagent import Capabilities, SubagentError
from dsh.subagent.testing import FakeProvider
from dsh.tool_subagent import Caller, DelegationArguments, Harness, SubagentTool, ToolResult
from dsh.tool_subagent import _harness as harness_module
from dsh.tool_subagent._cli import build_parser, main, run_command
from dsh.tool_subagent._jobs_command import _as_json
from dsh.tool_subagent._mcp.server import mcp_tool, to_call_result
from dsh.tool_subagent.errors import ProfileError

SCHEMA = {
    "type": "object",
    "properties": {"failing": {"type": "array", "items": {"type": "string"}}},
    "required": ["failing"],
}
ANSWER = '{ "failing": ["test_a", "test_b"] }'
COMPACT = '{"failing":["test_a","test_b"]}'
FAILURE = (
    "subagent run failed\nDiagnostic: Product subagent failure (product: fake; stage: output;"
    " category: structured-output)"
)
PROVIDERS: list[FakeProvider] = []


class Failing(pydantic.BaseModel):
    failing: list[str]


def _load(kind: str, config: Any = None) -> FakeProvider:
    if kind != "fake":
        raise SubagentError(f'no subagent provider kind "{kind}" is installed', code="UNKNOWN")
    provider = FakeProvider("fake", capabilities=Capabilities(output_schema=True))
    PROVIDERS.append(provider)
    return provider


@pytest.fixture(autouse=True)
def fake_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness_module, "load_provider", _load)


def profile(**tool: Any) -> dict[str, Any]:
    return {"provider": [{"kind": "fake"}], "tool": [{"provider": "fake", **tool}]}


def caller(tmp_path: Path) -> Caller:
    return Caller("s1", str(tmp_path))


def test_the_schema_is_caller_only_never_in_the_models_input_schema() -> None:
    assert "output_schema" not in DelegationArguments.input_schema(background=True)["properties"]
    assert "output_schema" in DelegationArguments.model_fields


async def test_a_tools_schema_gives_the_value_and_compact_json(tmp_path: Path) -> None:
    async with Harness.from_profile(profile(output_schema=SCHEMA)) as harness:
        tool = harness.tool("subagent")
        result = await tool.call({"description": "d", "prompt": ANSWER}, caller(tmp_path))
        assert result == ToolResult(
            text=COMPACT,
            value={
                "stop_reason": "completed",
                "diagnostic": None,
                "structured_output": {"failing": ["test_a", "test_b"]},
            },
        )
        assert PROVIDERS[-1].requests[-1].output_schema == SCHEMA
        failed = await tool.call({"description": "d", "prompt": '{"failing": 3}'}, caller(tmp_path))
        assert (failed.text, failed.is_error) == (FAILURE, True)


async def test_a_python_caller_passes_a_model_class_and_gets_its_instance(tmp_path: Path) -> None:
    async with Harness.from_profile(profile()) as harness:
        tool = harness.tool("subagent")
        assert isinstance(tool, SubagentTool)
        arguments = DelegationArguments(description="d", prompt=ANSWER, output_schema=Failing)
        result = await tool.delegate(arguments, caller(tmp_path))
        assert result.value is not None
        assert result.value["structured_output"] == Failing(failing=["test_a", "test_b"])
        assert result.text == COMPACT
        assert PROVIDERS[-1].requests[-1].output_schema == Failing.model_json_schema()
        # A mapping works too, and a bad schema is refused naming the field, before a start.
        starts = len(PROVIDERS[-1].requests)
        bad = await tool.delegate(
            {"description": "d", "prompt": "x", "output_schema": {"type": 5}}, caller(tmp_path)
        )
        assert bad.is_error
        assert bad.text.startswith('invalid arguments: field "output_schema": Value error, the')
        assert "is not a valid JSON Schema" in bad.text
        assert len(PROVIDERS[-1].requests) == starts


async def test_a_background_job_keeps_the_value_in_its_snapshot(tmp_path: Path) -> None:
    async with Harness.from_profile(profile(output_schema=SCHEMA)) as harness:
        out, err = io.StringIO(), io.StringIO()
        code = await run_command(
            harness, ANSWER, background=True, as_json=True, stdout=out, stderr=err
        )
        report = json.loads(out.getvalue())
        assert (code, report["text"]) == (0, COMPACT)
        assert report["structured_output"] == {"failing": ["test_a", "test_b"]}
        harness.jobs.store.flush(5.0)
        record = harness.jobs.store.get(report["job_id"])
        assert record is not None
        assert record.status is JobStatus.COMPLETED
        shown = _as_json(record)  # what dsh jobs show prints
        assert shown["structured_output"] == {"failing": ["test_a", "test_b"]}


def test_a_profile_schema_is_inline_or_a_file_beside_the_profile(tmp_path: Path) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "failing.json").write_text(json.dumps(SCHEMA))
    path = tmp_path / "profile.toml"
    path.write_text(
        '[[provider]]\nkind = "fake"\n[[tool]]\nprovider = "fake"\n'
        'output_schema = "schemas/failing.json"\n'
    )
    (tool,) = Harness.from_profile(path).delegation_tools
    assert tool.config.output_schema == SCHEMA
    (tool,) = Harness.from_profile(profile(output_schema=SCHEMA)).delegation_tools
    assert tool.config.output_schema == SCHEMA


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"type": "nope"}, "the output schema is not a valid JSON Schema (at /type:"),
        ("missing.json", "cannot read the schema file 'missing.json': No such file or directory"),
        (5, "Input should be a valid dictionary"),
    ],
)
def test_a_bad_profile_schema_is_refused_naming_the_field(value: Any, problem: str) -> None:
    with pytest.raises(ProfileError) as info:
        Harness.from_profile(profile(output_schema=value))
    assert info.value.field == "tool[0].output_schema"
    assert problem in str(info.value)


def test_dsh_run_output_schema_reads_a_json_file(tmp_path: Path) -> None:
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA))
    args = build_parser().parse_args(["run", "--output-schema", str(schema_file), "task"])
    assert args.output_schema == SCHEMA
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "invalid.json").write_text('{"type": 7}')
    for name, problem in (
        ("bad.json", "the schema file is not JSON (Expecting property name"),
        ("invalid.json", "the output schema is not a valid JSON Schema"),
    ):
        err = io.StringIO()
        with pytest.raises(SystemExit), contextlib.redirect_stderr(err):
            build_parser().parse_args(["run", "--output-schema", str(tmp_path / name), "t"])
        assert "argument --output-schema: " in err.getvalue()
        assert problem in err.getvalue()


def test_dsh_run_prints_the_compact_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA))
    prof = tmp_path / "p.toml"
    prof.write_text('[[provider]]\nkind = "fake"\n')
    argv = ["run", "--profile", str(prof), "--cwd", str(tmp_path), "--output-schema"]
    assert main([*argv, str(schema_file), ANSWER]) == 0
    assert capsys.readouterr().out == COMPACT + "\n"
    assert main([*argv, str(schema_file), "--json", ANSWER]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["structured_output"] == {"failing": ["test_a", "test_b"]}


async def test_mcp_lists_an_object_schema_and_returns_structured_content(tmp_path: Path) -> None:
    fixed = profile(output_schema=SCHEMA, enable_run_in_background=False)
    async with Harness.from_profile(fixed) as harness:
        tool = harness.tool("subagent")
        listed = mcp_tool(tool)
        assert listed.output_schema == SCHEMA
        result = await tool.call({"description": "d", "prompt": ANSWER}, caller(tmp_path))
        converted = to_call_result(result, structured=True)
        assert converted.structured_content == {"failing": ["test_a", "test_b"]}
        assert to_call_result(result).structured_content is None
    # A tool that may answer with a job id, or whose schema is not an object, declares none.
    for other in (profile(output_schema=SCHEMA), profile(output_schema={"type": "array"})):
        (tool,) = Harness.from_profile(other).delegation_tools
        assert mcp_tool(tool).output_schema is None
