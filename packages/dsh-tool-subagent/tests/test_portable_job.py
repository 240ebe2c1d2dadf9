"""Background delegations as plain data (what the Ray executor sends), and the [jobs] keys.

The portable path runs here in-process: the harness's registry gets an executor that demands
portable work but runs it locally, so the worker side (``run_delegation``) runs against a
``FakeProvider`` kind. The real cluster is exercised in ``tests-e2e/ray``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar

import pytest

from dsh.jobs import JobOutcome, JobStarted, JobStatus, JobWork, LocalExecutor, PortableWork
from dsh.subagent import Parent, SubagentError, SubagentStartRequest, TextBlock
from dsh.subagent.testing import FakeProvider
from dsh.tool_subagent import Caller, DelegationArguments, Harness, SubagentTool
from dsh.tool_subagent import _harness as harness_module
from dsh.tool_subagent import _portable_job as portable_module
from dsh.tool_subagent.errors import ProfileError

CONFIG = {"provider_name": "fake-remote", "env": {"EXAMPLE": "value"}}
PROFILE = {"provider": [{"kind": "fake", "config": CONFIG}], "tool": [{"provider": "fake-remote"}]}


class Remote(LocalExecutor):
    """Demands portable work (as the Ray executor does) and records what it was sent."""

    name: ClassVar[str] = "remote"
    portable: ClassVar[bool] = True

    def __init__(self) -> None:
        self.sent: list[PortableWork] = []

    async def execute(self, work: JobWork, started: JobStarted) -> JobOutcome:
        assert isinstance(work, PortableWork)
        self.sent.append(work)
        # What crosses to a worker: a JSON round trip of the target and the arguments.
        crossed = PortableWork(*json.loads(json.dumps([work.target, dict(work.arguments)])))
        return await super().execute(crossed, started)


def load_fake(kind: str, config: Any = None) -> FakeProvider:
    if kind != "fake":
        raise SubagentError(f'no subagent provider kind "{kind}" is installed', code="UNKNOWN")
    return FakeProvider(dict(config or {}).get("provider_name", "fake"))


@pytest.fixture(autouse=True)
def fake_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness_module, "load_provider", load_fake)
    monkeypatch.setattr(portable_module, "load_provider", load_fake)


async def background(harness: Harness, caller: Caller, prompt: str) -> tuple[str, str]:
    result = await harness.tool("subagent").call(
        {"description": "portable", "prompt": prompt, "run_in_background": True}, caller
    )
    assert not result.is_error, result.text
    assert result.value is not None
    snapshot = await harness.jobs.wait(str(result.value["job_id"]), 10, caller)
    return snapshot.status_line, harness.jobs.read(snapshot.id, caller)


async def test_a_portable_job_carries_plain_data_and_ends_like_a_local_one(tmp_path: Path) -> None:
    caller = Caller(session_id="s1", cwd=str(tmp_path))
    async with Harness.from_profile(PROFILE) as harness:
        local = await background(harness, caller, "same task")
        remote = Remote()
        harness.jobs.executor = remote
        assert await background(harness, caller, "same task") == local
    (work,) = remote.sent
    assert work.target == "dsh.tool_subagent._portable_job:run_delegation"
    assert dict(work.arguments) == {
        "kind": "fake",
        "config": CONFIG,
        # The request travels whole: every field of it, as SubagentStartRequest.to_json makes.
        "request": {
            "prompt": [{"type": "text", "text": "same task"}],
            "parent": {"session_id": "s1", "cwd": str(tmp_path)},
            "label": "portable",
            "output_schema": None,
            "max_depth": None,
            "tool_filter": None,
            "persona": None,
            "max_cost_usd": None,
        },
        # The tool's limits travel too; the worker enforces them (docs/liveness.md).
        "limits": {
            "timeout_s": None,
            "stall_timeout_s": 900.0,
            "max_total_tokens": 50_000_000,
            "max_output_tokens": None,
            "max_cost_usd": None,
        },
        # A shared workspace (the default) sends no worktree settings.
        "workspace": None,
        # Names for the worker's span, and the caller's trace context (none is current here).
        "tool": "subagent",
        "trace_context": {},
    }


def test_a_request_travels_with_every_field_and_a_new_field_needs_no_codec_change() -> None:
    full = SubagentStartRequest(
        prompt=(TextBlock("a"), TextBlock("b")),
        parent=Parent(session_id="s", cwd="/w"),
        label="l",
        output_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
        max_depth=2,
        tool_filter=("Read", "Grep"),
        persona="reviewer",
    )
    work = portable_module.portable_delegation("fake", {}, full)
    crossed = json.loads(work.to_json())["arguments"]["request"]
    back = SubagentStartRequest.from_json(crossed)
    assert back == replace(full, tool_filter=["Read", "Grep"])  # a JSON list, still a Sequence
    assert {f.name for f in fields(SubagentStartRequest)} == set(crossed)

    @dataclass(frozen=True, slots=True)
    class Extended(SubagentStartRequest):
        """A request with a field the codec has never heard of."""

        budget_usd: float | None = None

    extended = Extended(prompt=(TextBlock("x"),), parent=Parent("s", None), budget_usd=1.5)
    assert Extended.from_json(json.loads(json.dumps(extended.to_json()))) == extended
    # A field the receiving side does not know is refused, never dropped.
    with pytest.raises(ValueError, match="no field 'budget_usd'"):
        SubagentStartRequest.from_json(extended.to_json())


async def test_a_field_the_provider_cannot_honour_is_refused_before_the_job_is_queued(
    tmp_path: Path,
) -> None:
    caller = Caller(session_id="s1", cwd=str(tmp_path))
    async with Harness.from_profile(PROFILE) as harness:
        remote = Remote()
        harness.jobs.executor = remote
        tool = harness.tool("subagent")
        assert isinstance(tool, SubagentTool)
        # No tool argument sets output_schema yet (issue 40): the request is built by hand.
        plain = DelegationArguments(description="d", prompt="p").request(caller, None)
        request = replace(plain, output_schema={"type": "object"})
        refused = tool._background(request, "d", caller)
        assert refused.is_error
        assert refused.text == (
            'subagent provider "fake-remote" does not support the "output_schema" capability'
        )
        assert harness.jobs.list(caller) == []
    assert remote.sent == []


async def test_a_cwd_missing_where_the_job_runs_fails_before_the_provider_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[str] = []
    monkeypatch.setattr(portable_module, "load_provider", lambda kind, config: built.append(kind))
    caller = Caller(session_id="s1", cwd=str(tmp_path / "elsewhere"))
    async with Harness.from_profile(PROFILE) as harness:
        harness.jobs.executor = Remote()
        status, output = await background(harness, caller, "task")
    assert status == f"[status: failed, {portable_module.NO_WORKSPACE}]"
    assert str(tmp_path) not in status
    assert (output, built) == ("", [])


async def test_a_provider_that_cannot_be_built_on_the_worker_fails_the_job_safely() -> None:
    request = SubagentStartRequest(prompt=(TextBlock("task"),), parent=Parent("s1", None))
    outcome = await portable_module.run_delegation(
        kind="not-installed-here", config={}, request=request.to_json(), limits={}
    )
    assert outcome == JobOutcome(JobStatus.FAILED, detail=portable_module.BUILD_FAILED)


def test_the_ray_executor_without_ray_is_a_profile_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the [ray] extra were not installed
    monkeypatch.delitem(sys.modules, "dsh.jobs._ray_executor", raising=False)
    with pytest.raises(ProfileError) as caught:
        Harness.from_profile({**PROFILE, "jobs": {"executor": "ray"}})
    assert caught.value.field == "jobs.executor"
    assert 'pip install "dsh-jobs[ray]"' in str(caught.value)


@pytest.mark.parametrize(
    ("jobs", "field", "text"),
    [
        ({"executor": "ray", "address": "nowhere"}, "jobs.address", "must be"),
        ({"executor": "ray", "max_runs_per_node": 0}, "jobs.max_runs_per_node", "greater"),
        ({"address": "auto"}, "jobs", 'address is a setting of executor = "ray"'),
        ({"executor": "spark"}, "jobs.executor", "'local' or 'ray'"),
    ],
)
def test_bad_executor_keys_are_profile_errors_naming_the_field(
    jobs: dict[str, Any], field: str, text: str
) -> None:
    with pytest.raises(ProfileError) as caught:
        Harness.from_profile({**PROFILE, "jobs": jobs})
    assert caught.value.field == field
    assert text in str(caught.value)


async def test_a_worktree_job_is_made_where_the_job_runs_from_the_shared_path(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "base"]):
        run_git(repo, *args)
    profile = {**PROFILE, "tool": [{"provider": "fake-remote", "workspace": "worktree"}]}
    caller = Caller(session_id="s1", cwd=str(repo))
    async with Harness.from_profile(profile) as harness:
        remote = Remote()
        harness.jobs.executor = remote
        status, output = await background(harness, caller, "echo me")
    assert status == "[status: completed]"
    # The worker made the worktree from the repository path and ran the fake product there.
    assert output == "echo me\nChanges: none"
    (work,) = remote.sent
    assert work.arguments["workspace"] == {
        "workspace": "worktree",
        "worktree_base": "head",
        "branch_prefix": "dsh/",
    }


def run_git(repo: Path, *args: str) -> None:
    import subprocess

    subprocess.run(  # noqa: TID251
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=repo,
        check=True,
    )
