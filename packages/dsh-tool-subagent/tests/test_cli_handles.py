"""The ``dsh`` command's usual handles: --version, --json, --timeout, -v, help, errors, pipes."""

from __future__ import annotations

import asyncio
import importlib.metadata
import io
import json
import logging
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

import dsh.subagent
from dsh.subagent import Capabilities, SubagentError
from dsh.subagent.testing import FakeProvider
from dsh.subprocess import Collect, SpawnSpec, default_runtime
from dsh.tool_subagent import Harness
from dsh.tool_subagent import _harness as harness_module
from dsh.tool_subagent._cli import main, run_command

HANGING: list[FakeProvider] = []


class _Config(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")
    outcome: str = "echo"
    depth_limit: bool = False


def _load(kind: str, config: Any = None) -> FakeProvider:
    if kind != "fake":
        raise SubagentError(f'no subagent provider kind "{kind}" is installed', code="UNKNOWN")
    parsed = _Config.model_validate(dict(config or {}))
    capabilities = Capabilities(depth_limit=parsed.depth_limit)
    if parsed.outcome == "hang":
        provider = FakeProvider("fake", delay=None, capabilities=capabilities)
        HANGING.append(provider)
        return provider
    if parsed.outcome == "error":
        from dsh.subagent.kit import FailureFacts

        facts = FailureFacts(product="Codex", stage="turn", category="internalServerError")
        return FakeProvider("fake", failure=facts, capabilities=capabilities)
    return FakeProvider("fake", capabilities=capabilities)


@pytest.fixture(autouse=True)
def fake_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness_module, "load_provider", _load)


@pytest.fixture
def dsh_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger("dsh")
    saved = (logger.level, list(logger.handlers), logger.propagate)
    yield logger
    logger.setLevel(saved[0])
    logger.handlers[:] = saved[1]
    logger.propagate = saved[2]


def _profile(tmp_path: Path, outcome: str = "echo") -> Path:
    path = tmp_path / f"{outcome}.toml"
    path.write_text(f'[[provider]]\nkind = "fake"\n[provider.config]\noutcome = "{outcome}"\n')
    return path


def test_version_names_the_installed_distribution(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"dsh {importlib.metadata.version('dsh-tool-subagent')}\n"


async def test_run_json_foreground_completed_and_failed(tmp_path: Path) -> None:
    for outcome, code in (("echo", 0), ("error", 1)):
        out, err = io.StringIO(), io.StringIO()
        async with Harness.from_profile(_profile(tmp_path, outcome)) as harness:
            rc = await run_command(harness, "json task", as_json=True, stdout=out, stderr=err)
        report = json.loads(out.getvalue())
        assert (rc, err.getvalue()) == (code, "")
        assert set(report) == {
            "stop_reason",
            "text",
            "diagnostic",
            "job_id",
            "elapsed_s",
            "exit_code",
            "timings",  # dsh's own stamps, host-only; the fake provider reports no usage
        }
        assert report["job_id"] is None
        assert report["exit_code"] == code
        assert 0 <= report["elapsed_s"] < 10
        if outcome == "echo":
            assert (report["stop_reason"], report["text"], report["diagnostic"]) == (
                "completed",
                "json task",
                None,
            )
        else:
            assert report["stop_reason"] == "error"
            assert report["diagnostic"].startswith(
                "Product subagent failure (product: Codex; stage: turn; category: "
                "internalServerError"
            )
            assert report["text"].startswith("subagent run failed\nDiagnostic: ")


async def test_run_json_background_names_the_job(tmp_path: Path) -> None:
    for outcome, code in (("echo", 0), ("error", 1)):
        out, err = io.StringIO(), io.StringIO()
        async with Harness.from_profile(_profile(tmp_path, outcome)) as harness:
            rc = await run_command(
                harness, "bg json", background=True, as_json=True, stdout=out, stderr=err
            )
        report = json.loads(out.getvalue())
        assert (rc, err.getvalue(), report["exit_code"]) == (code, "", code)
        assert re.fullmatch(r"subagent-[0-9a-f]{12}", report["job_id"]), report["job_id"]
        if outcome == "echo":
            assert (report["stop_reason"], report["text"]) == ("completed", "bg json")
        else:
            assert report["stop_reason"] == "error"
            assert report["diagnostic"].startswith("Product subagent failure (product: Codex")


def test_doctor_json(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    class Healthy:
        @staticmethod
        def doctor() -> list[tuple[str, str, bool]]:
            return [("Fake version", "1.2.3", True)]

    class Entry:
        name, dist = "fake", None

        @staticmethod
        def load() -> type[Healthy]:
            return Healthy

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda *, group: [Entry()])
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    # The machine's containment rows follow the providers (their values depend on the machine).
    containment = report["providers"].pop()
    assert containment["kind"] == "containment"
    assert [row["check"] for row in containment["checks"]] == ["layers", "kernel layer", "limits"]
    assert report == {
        "ok": True,
        "providers": [
            {
                "kind": "fake",
                "checks": [
                    {"check": "package", "value": "?", "ok": True},
                    {"check": "Fake version", "value": "1.2.3", "ok": True},
                ],
            }
        ],
    }


@pytest.mark.parametrize("as_json", [False, True])
def test_timeout_cancels_closes_the_run_and_exits_124(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    HANGING.clear()
    argv = ["run", "--timeout", "0.3", "--profile", str(_profile(tmp_path, "hang")), "wait"]
    rc = main([*argv[:1], "--json", *argv[1:]] if as_json else argv)
    captured = capsys.readouterr()
    assert rc == 124
    assert HANGING[0].runs  # it was running, and was closed before main() returned
    assert HANGING[0].open_runs == ()
    message = "dsh run: cancelled after the --timeout of 0.3 s"
    if as_json:
        report = json.loads(captured.out)
        assert (report["stop_reason"], report["text"], report["exit_code"]) == (
            "timeout",
            message,
            124,
        )
        assert report["elapsed_s"] >= 0.3
    else:
        assert (captured.out, captured.err) == ("", message + "\n")


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan"])
def test_timeout_must_be_positive_seconds(
    value: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["run", "--timeout", value, "--profile", str(_profile(tmp_path)), "t"]) == 2
    assert "--timeout" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "level"),
    [
        (["-v", "profile", "check"], logging.INFO),
        (["-vv", "profile", "check"], logging.DEBUG),
        (["profile", "check", "-vv"], logging.DEBUG),
        (["--log-level", "error", "profile", "check"], logging.ERROR),
        (["profile", "check", "--log-level", "DEBUG"], logging.DEBUG),
    ],
)
def test_verbosity_sets_the_dsh_log_level_and_logs_to_stderr(
    flags: list[str],
    level: int,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    dsh_logger: logging.Logger,
) -> None:
    assert main([*flags, str(_profile(tmp_path))]) == 0
    assert dsh_logger.level == level
    logging.getLogger("dsh.tool_subagent").log(level, "a record at the chosen level")
    assert (
        f"dsh: {logging.getLevelName(level)} dsh.tool_subagent: a record at the chosen level"
        in (capsys.readouterr().err)
    )


def test_bad_log_level_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--log-level", "loud", "doctor"]) == 2
    assert "--log-level" in capsys.readouterr().err


def test_profile_check_help_names_the_argument(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "check", "--help"]) == 0
    usage = capsys.readouterr().out
    assert "PROFILE" in usage
    assert "the profile TOML file to check" in usage
    assert not re.search(r"(?<![\w-])P(?![\w-])", usage), usage


def test_missing_profile_file_names_path_and_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope" / "team.toml"
    assert main(["profile", "check", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"dsh: invalid profile: profile: cannot read {missing}: No such file or directory\n"
    )


async def test_unknown_tool_of_a_missing_kind_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The command imports it where it is used (start-up: docs/performance.md).
    monkeypatch.setattr(dsh.subagent, "installed_provider_kinds", lambda: ("codex",))
    async with Harness.from_profile(_profile(tmp_path)) as harness:
        err = io.StringIO()
        rc = await run_command(harness, "t", tool_name="subagent_claude_code", stderr=err)
    assert rc == 2
    assert err.getvalue() == (
        'dsh run: no delegation tool named "subagent_claude_code" (tools: subagent_fake);'
        ' the "claude-code" provider is not installed, install it with'
        ' pip install "dsh-tool-subagent[claude-code]"\n'
    )


@pytest.mark.parametrize(("depth_limit", "expected"), [(False, "provider-managed"), (True, 3)])
def test_a_tool_row_without_max_depth_mounts(depth_limit: bool, expected: object) -> None:
    profile = {
        "provider": [{"kind": "fake", "config": {"depth_limit": depth_limit}}],
        "tool": [{"provider": "fake"}],
    }
    (tool,) = Harness.from_profile(profile).delegation_tools
    assert tool.config.max_depth == expected


async def test_closed_stdout_exits_quietly(tmp_path: Path) -> None:
    """``dsh profile check P | head -1``: the reader is gone before dsh writes."""
    profile = tmp_path / "empty.toml"
    profile.write_text("tool = []\n")
    script = '"$0" -m dsh.tool_subagent._cli profile check "$1" | true; echo "rc=${PIPESTATUS[0]}"'
    spec = SpawnSpec(
        argv=["bash", "-c", script, sys.executable, str(profile)],
        stdout=Collect(1 << 16),
        stderr=Collect(1 << 16),
    )
    proc = await default_runtime().spawn(spec)
    try:
        async with asyncio.timeout(60):
            outcome = await proc.wait()
    finally:
        await proc.aclose()
    assert outcome.exit_code == 0
    assert (proc.collected("stdout").text, proc.collected("stderr").text) == ("rc=141\n", "")
