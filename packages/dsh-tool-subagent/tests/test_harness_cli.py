"""Profiles, Harness.describe(), the default profile and the dsh command's exit codes."""

from __future__ import annotations

import importlib.metadata
import io
import json
import re
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pydantic
import pytest

from dsh.subagent import StopReason, SubagentError, SubagentResult, installed_provider_kinds
from dsh.subagent.kit import DoctorCheck, FailureFacts
from dsh.subagent.testing import FakeProvider
from dsh.tool_subagent import Harness, default_profile
from dsh.tool_subagent import _harness as harness_module
from dsh.tool_subagent._cli import main, run_command
from dsh.tool_subagent.errors import ProfileError

BUILT: list[FakeProvider] = []


class FakeConfig(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")
    provider_name: str = "fake"
    permission_mode: str = pydantic.Field(default="default", pattern="^(default|dangerous)$")
    outcome: str = "echo"


def fake_load_provider(kind: str, config: Any = None) -> FakeProvider:
    """Stands in for entry-point loading: kind "fake" builds a FakeProvider from a config."""
    if kind != "fake":
        raise SubagentError(f'no subagent provider kind "{kind}" is installed', code="UNKNOWN")
    try:
        parsed = FakeConfig.model_validate(dict(config or {}))
    except pydantic.ValidationError as exc:
        raise SubagentError("invalid config", code="INVALID_PROVIDER_CONFIG") from exc
    failures = {
        "error": FailureFacts(product="Codex", stage="turn", category="internalServerError"),
    }
    if parsed.outcome == "hang":
        provider = FakeProvider(parsed.provider_name, delay=None)
        BUILT.append(provider)
        return provider
    if parsed.outcome == "slow":
        return FakeProvider(parsed.provider_name, delay=1.6)
    if parsed.outcome == "refusal":
        return FakeProvider(parsed.provider_name, result=SubagentResult(StopReason.REFUSAL))
    return FakeProvider(parsed.provider_name, failure=failures.get(parsed.outcome))


@pytest.fixture
def fake_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness_module, "load_provider", fake_load_provider)


PROFILE = """
[[provider]]
kind = "fake"
[provider.config]
provider_name = "fake-primary"

[[provider]]
kind = "fake"

[[tool]]
provider = "fake-primary"
tool_name = "subagent_primary"
max_depth = "provider-managed"

[jobs]
max_concurrent_jobs_per_owner = 4
"""


@pytest.mark.usefixtures("fake_kind")
async def test_profile_builds_and_describes(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(PROFILE)
    async with Harness.from_profile(path) as harness:
        assert harness.subagents.names() == ("fake-primary", "fake")
        assert [t.name for t in harness.tools] == [
            "subagent_primary",
            "job_output",
            "job_list",
            "job_kill",
        ]
        assert harness.jobs.config.max_concurrent_jobs_per_owner == 4
        described = harness.describe()
        assert json.loads(json.dumps(described)) == described
        assert described["starts"] == 0
        assert described["job_tools"] == ["job_output", "job_list", "job_kill"]
        assert described["tools"] == [
            {
                "name": "subagent_primary",
                "provider": "fake-primary",
                "parameters": ["description", "prompt", "run_in_background"],
                "required": ["description", "prompt"],
            }
        ]
        assert described["providers"][0]["inherits_parent_context"] is False
        assert described["providers"][0]["capabilities"]["depth_limit"] is False


@pytest.mark.usefixtures("fake_kind")
@pytest.mark.parametrize(
    ("profile", "message"),
    [
        (
            {"provider": [{"kind": "fake"}, {"kind": "fake", "config": {"permission_mode": "x"}}]},
            "provider[1].config.permission_mode: String should match pattern",
        ),
        ({"provider": [{"kind": "fake", "extra": 1}]}, "provider[0].extra: Extra inputs"),
        ({"tool": [{"provider": "fake", "max_depth": "x"}]}, "tool[0].max_depth"),
        ({"jobs": {"wait_timeout_ms": 0}}, "jobs.wait_timeout_ms: Input should be greater than 0"),
        ({"provider": [{"kind": "nope"}]}, 'provider[0].kind: no subagent provider kind "nope"'),
        (
            {"provider": [{"kind": "fake"}], "tool": [{"provider": "fake", "max_depth": 3}]},
            'tool[0].max_depth: provider "fake" cannot enforce max_depth',
        ),
        (
            {
                "provider": [{"kind": "fake"}],
                "tool": [
                    {"provider": "fake", "max_depth": "provider-managed"},
                    {"provider": "fake", "max_depth": "provider-managed"},
                ],
            },
            'tool[1].tool_name: "subagent" is already used in this harness',
        ),
        (
            {"provider": [{"kind": "fake"}, {"kind": "fake"}]},
            "provider[1].config.provider_name:",
        ),
    ],
)
def test_profile_errors_name_table_index_and_field(profile: dict[str, Any], message: str) -> None:
    with pytest.raises(ProfileError) as info:
        Harness.from_profile(profile)
    assert message in str(info.value)


@pytest.mark.usefixtures("fake_kind")
@pytest.mark.parametrize(
    ("profile", "field"),
    [
        (
            {"provider": [{"kind": "fake"}, {"kind": "fake", "config": {"permission_mode": "x"}}]},
            "provider[1].config.permission_mode",
        ),
        ({"jobs": {"wait_timeout_ms": 0}}, "jobs.wait_timeout_ms"),
        ({"provider": [{"kind": "nope"}]}, "provider[0].kind"),
        ({"provider": [{"kind": "fake"}, {"kind": "fake"}]}, "provider[1].config.provider_name"),
        (
            {"provider": [{"kind": "fake"}], "tool": [{"provider": "fake", "max_depth": 3}]},
            "tool[0].max_depth",
        ),
        # The provider's name mentions max_depth: the field comes from the error, not its text.
        ({"provider": [{"kind": "fake"}], "tool": [{"provider": "max_depth"}]}, "tool[0].provider"),
        (
            {
                "provider": [{"kind": "fake"}],
                "tool": [{"provider": "fake", "tool_name": "job_kill"}],
            },
            "tool[0].tool_name",
        ),
    ],
)
def test_profile_errors_carry_their_field(profile: dict[str, Any], field: str) -> None:
    with pytest.raises(ProfileError) as info:
        Harness.from_profile(profile)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")


def test_a_profile_that_is_not_toml_has_no_field(tmp_path: Path) -> None:
    path = tmp_path / "profile.toml"
    path.write_text("[[provider]\n", encoding="utf-8")
    with pytest.raises(ProfileError) as info:
        Harness.from_profile(path)
    assert info.value.field is None


def test_uninstalled_kind_names_the_extra() -> None:
    if "codex" in installed_provider_kinds():
        kind = "not-installed-kind"
        expected = "dsh-tool-subagent["
    else:
        kind, expected = "codex", 'pip install "dsh-tool-subagent[codex]"'
    with pytest.raises(ProfileError) as info:
        Harness.from_profile({"provider": [{"kind": kind}]})
    assert expected in str(info.value)


async def test_default_profile_has_every_installed_kind_and_the_job_stack() -> None:
    kinds = installed_provider_kinds()
    assert default_profile() == {"provider": [{"kind": k} for k in kinds], "jobs": {}}
    async with Harness.from_profile() as harness:
        described = harness.describe()
        expected_tools = ["subagent_" + n.replace("-", "_") for n in harness.subagents.names()]
        assert [t["name"] for t in described["tools"]] == expected_tools
        assert all(t.config.max_depth == "provider-managed" for t in harness.delegation_tools)
        assert [p["kind"] for p in described["providers"]] == list(kinds)
        assert described["job_tools"] == ["job_output", "job_list", "job_kill"]
        assert described["starts"] == 0


@pytest.mark.usefixtures("fake_kind")
@pytest.mark.parametrize(
    ("outcome", "background", "code"),
    [
        ("echo", False, 0),
        ("echo", True, 0),
        ("error", False, 1),
        ("error", True, 1),
        ("refusal", False, 1),
    ],
)
async def test_run_command_exit_codes(
    outcome: str, background: bool, code: int, run_fake: Any
) -> None:
    rc, out, err, starts = await run_fake(outcome, "the task text", background)
    assert starts == 1
    assert rc == code
    if code == 0:
        assert out == "the task text\n"  # --background ends it the same way
    elif outcome == "error":
        assert out == ""
        assert "Product subagent failure (product: Codex; stage: turn" in err
    else:
        assert err.strip() == "subagent declined the task"


@pytest.mark.usefixtures("fake_kind")
async def test_run_command_unknown_tool_is_usage_error() -> None:
    async with Harness.from_profile({"provider": [{"kind": "fake"}]}) as harness:
        err = io.StringIO()
        assert await run_command(harness, "t", tool_name="nope", stderr=err) == 2
        assert 'no delegation tool named "nope"' in err.getvalue()


def test_cli_usage_and_profile_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_kind: None
) -> None:
    assert main([]) == 2
    assert main(["run"]) == 2
    path = tmp_path / "p.toml"
    path.write_text(PROFILE)
    assert main(["profile", "check", str(path)]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["starts"] == 0
    assert described["tools"][0]["name"] == "subagent_primary"
    bad = tmp_path / "bad.toml"
    bad.write_text("[[tool]]\nprovider = 1\n")
    assert main(["profile", "check", str(bad)]) == 2
    assert "tool[0].provider" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["profile", "check"], ["run", "--profile"]])
def test_a_profile_that_is_not_utf8_is_an_invalid_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes('[[provider]]\nkind = "caf\u00e9"\n'.encode("latin-1"))
    argv = [*command, str(path)] + (["the task"] if command[0] == "run" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == "dsh: invalid profile: profile: the file is not UTF-8 text (TOML must be)\n"


def _doctor_rows(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, set[tuple[str, ...]]]:
    """Run ``dsh doctor`` wide enough that no cell wraps; return its code and table rows."""
    monkeypatch.setenv("COLUMNS", "200")
    capsys.readouterr()
    rc = main(["doctor"])
    out = capsys.readouterr().out
    rows = {
        tuple(cell.strip() for cell in text.strip().strip("│").split("│"))
        for text in out.splitlines()
        if text.startswith("│")
    }
    # The machine's containment rows are tests-e2e/test_doctor.py's (they depend on the machine).
    return rc, {row for row in rows if row[0] != "containment"}


@dataclass
class _Entry:
    """Just what ``dsh doctor`` reads of an entry point (the real ones are the e2e test's)."""

    name: str
    target: Any
    dist: None = None

    def load(self) -> Any:
        if isinstance(self.target, Exception):
            raise self.target
        return self.target


def _with_entries(monkeypatch: pytest.MonkeyPatch, *entries: _Entry) -> None:
    def fake(*, group: str) -> list[_Entry]:
        assert group == "dsh.subagent.providers"
        return list(entries)

    # dsh doctor reads entry points through the importlib.metadata module, so this reaches it.
    monkeypatch.setattr(importlib.metadata, "entry_points", fake)


class _Healthy:
    @staticmethod
    def doctor() -> list[DoctorCheck]:
        return [DoctorCheck("Fake version", "1.2.3", True), DoctorCheck("Fake payload", "ok", True)]


class _Broken:
    @staticmethod
    def doctor() -> list[DoctorCheck]:
        return [DoctorCheck("Fake payload", "missing or not executable", False)]


class _Raising:
    @staticmethod
    def doctor() -> list[DoctorCheck]:
        raise RuntimeError("boom")


def test_doctor_with_no_provider_installed_fails_naming_the_extra(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _with_entries(monkeypatch)
    rc, rows = _doctor_rows(capsys, monkeypatch)
    assert rc == 1
    assert rows == {("(none)", "providers", 'pip install "dsh-tool-subagent[all]"', "NO")}


def test_doctor_prints_each_providers_own_checks(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _with_entries(monkeypatch, _Entry("fake", _Healthy), _Entry("plain", object))
    rc, rows = _doctor_rows(capsys, monkeypatch)
    assert rc == 0
    assert rows == {
        ("fake", "package", "?", "yes"),
        ("fake", "Fake version", "1.2.3", "yes"),
        ("fake", "Fake payload", "ok", "yes"),
        ("plain", "package", "?", "yes"),
        ("plain", "checks", "(provider has no doctor hook)", "yes"),
    }


@pytest.mark.parametrize(
    ("target", "row"),
    [
        pytest.param(
            _Broken, ("Fake payload", "missing or not executable", "NO"), id="failed-check"
        ),
        pytest.param(_Raising, ("checks", "doctor hook raised", "NO"), id="raising-hook"),
        pytest.param(ImportError("gone"), ("import", "failed", "NO"), id="import-error"),
    ],
)
def test_doctor_fails_when_any_provider_is_broken(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    target: Any,
    row: tuple[str, ...],
) -> None:
    _with_entries(monkeypatch, _Entry("fake", _Healthy), _Entry("bad", target))
    rc, rows = _doctor_rows(capsys, monkeypatch)
    assert rc == 1
    assert ("bad", *row) in rows
    assert ("fake", "Fake payload", "ok", "yes") in rows  # the healthy one is still reported


class _Terminal(io.StringIO):
    """A text stream that says it is a terminal (as stderr is in an interactive shell)."""

    def isatty(self) -> bool:
        return True


@pytest.mark.usefixtures("fake_kind")
async def test_run_status_line_is_drawn_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TTY_INTERACTIVE", "TTY_COMPATIBLE", "NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")  # rich draws nothing on a dumb terminal
    profile = {
        "provider": [{"kind": "fake", "config": {"outcome": "slow"}}],
        "tool": [
            {"provider": "fake", "tool_name": "subagent_status", "max_depth": "provider-managed"}
        ],
    }
    async with Harness.from_profile(profile) as harness:
        out, err = io.StringIO(), _Terminal()
        began = time.monotonic()
        rc = await run_command(harness, "the task text", stdout=out, stderr=err)
        took = time.monotonic() - began
        # stderr not a terminal: no status line at all
        plain_out, plain_err = io.StringIO(), io.StringIO()
        plain_rc = await run_command(harness, "the task text", stdout=plain_out, stderr=plain_err)
    assert rc == 0
    assert took >= 1.5
    assert out.getvalue() == "the task text\n"  # stdout carries only the answer
    drawn = err.getvalue()
    assert "subagent_status: running (0s)" in drawn
    elapsed = {int(s) for s in re.findall(r"subagent_status: running \((\d+)s\)", drawn)}
    assert elapsed & {1, 2, 3}, drawn  # the elapsed time advanced while the run was going
    assert max(elapsed) <= took + 1
    assert "the task text" not in drawn
    assert plain_rc == 0
    assert plain_out.getvalue() == "the task text\n"
    assert plain_err.getvalue() == ""


def test_ctrl_c_cancels_the_run_closes_it_and_exits_130(tmp_path: Path, fake_kind: None) -> None:
    path = tmp_path / "hang.toml"
    path.write_text(
        '[[provider]]\nkind = "fake"\n[provider.config]\noutcome = "hang"\n'
        '[[tool]]\nprovider = "fake"\nmax_depth = "provider-managed"\n'
    )
    BUILT.clear()
    stop = threading.Event()

    def interrupt_once_running() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not stop.is_set():
            if BUILT and BUILT[0].runs:
                main_ident = threading.main_thread().ident
                assert main_ident is not None
                signal.pthread_kill(main_ident, signal.SIGINT)  # as a terminal Ctrl-C does
                return
            time.sleep(0.01)

    thread = threading.Thread(target=interrupt_once_running)
    thread.start()
    try:
        rc = main(["run", "--profile", str(path), "--cwd", str(tmp_path), "wait forever"])
    finally:
        stop.set()
        thread.join()
    assert rc == 130
    assert BUILT[0].runs
    assert BUILT[0].open_runs == ()  # the run was closed before the command returned
    assert BUILT[0].requests[0].parent.cwd == str(tmp_path)


@pytest.mark.usefixtures("fake_kind")
def test_one_tool_builds_only_its_provider() -> None:
    """``dsh run`` builds only the tool it runs and that tool's provider, so another product's
    modules are never imported; an unknown tool builds everything (its error lists them all)."""
    loaded: list[str] = []

    def counting(kind: str, config: Any = None) -> FakeProvider:
        loaded.append(dict(config or {}).get("provider_name", "fake"))
        return fake_load_provider(kind, config)

    two: dict[str, Any] = {
        "provider": [
            {"kind": "fake", "config": {"provider_name": "one"}},
            {"kind": "fake", "config": {"provider_name": "two"}},
        ]
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(harness_module, "load_provider", counting)
        second = Harness.from_profile(two, tool="subagent_two", one_tool=True)
        assert (loaded, [t.name for t in second.delegation_tools]) == (["two"], ["subagent_two"])
        loaded.clear()
        first = Harness.from_profile(two, one_tool=True)
        assert (loaded, [t.name for t in first.delegation_tools]) == (["one"], ["subagent_one"])
        loaded.clear()
        Harness.from_profile(two, tool="nope", one_tool=True)
        assert loaded == ["one", "two"]
        loaded.clear()
        tool_a = {"provider": "one", "tool_name": "a", "max_depth": "provider-managed"}
        tool_b = {"provider": "two", "tool_name": "b", "max_depth": "provider-managed"}
        explicit = {**two, "tool": [tool_a, tool_b]}
        chosen = Harness.from_profile(explicit, tool="b", one_tool=True)
        assert (loaded, [t.name for t in chosen.delegation_tools]) == (["two"], ["b"])
        # Errors still name the table's index in the profile, not in the narrowed build.
        broken = {
            **explicit,
            "tool": [explicit["tool"][0], {"provider": "two", "tool_name": "job_list"}],
        }
        with pytest.raises(ProfileError, match=r"^tool\[1\]\.tool_name"):
            Harness.from_profile(broken, tool="job_list", one_tool=True)


@pytest.mark.usefixtures("fake_kind")
async def test_run_command_workspace_options_replace_the_tools(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()  # not a git directory (no HEAD): passed over, as git does
    profile = {"provider": [{"kind": "fake"}], "tool": [{"provider": "fake"}]}
    out, err = io.StringIO(), io.StringIO()
    async with Harness.from_profile(profile) as harness:
        rc = await run_command(
            harness,
            "t",
            cwd=str(tmp_path),
            settings={"workspace": "worktree"},
            as_json=True,
            stdout=out,
            stderr=err,
        )
        # Outside a work tree: refused before the product is started.
        assert harness.describe()["starts"] == 0
    assert rc == 1
    report = json.loads(out.getvalue())
    assert report["text"] == (
        'workspace = "worktree": the working directory is not inside a git repository'
    )


def test_a_branch_prefix_git_would_refuse_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "--workspace", "worktree", "--branch-prefix", "a..b", "t"]) == 2
    assert "--branch-prefix: branch_prefix is not a valid git ref name" in capsys.readouterr().err
