"""``workspace = "worktree"``: a git worktree per run, its changes back as a branch, nothing left.

The product is a FakeProvider whose run edits files in the cwd it was given; git is the real
one (run here with the standard library's subprocess, hence the ``noqa: TID251``). The real
products' worktree runs are in tests-e2e/test_worktree_real.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pydantic
import pytest

from dsh.jobs import JobRegistry, JobStatus
from dsh.subagent import (
    ResolvedStartRequest,
    StopReason,
    SubagentResult,
    SubagentService,
    TextBlock,
)
from dsh.subagent.testing import FakeProvider
from dsh.tool_subagent import Caller, SubagentTool, SubagentToolConfig
from dsh.tool_subagent._workspace import Changes
from dsh.tool_subagent._worktree import sweep_lost_worktrees, worktrees_root

IDENTITY = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(  # noqa: TID251 - the test's own git
        ["git", *IDENTITY, *args], cwd=repo, capture_output=True, text=True, check=True
    )
    return done.stdout


def make_repo(root: Path) -> Path:
    """A repository with a commit, an uncommitted change, an untracked and an ignored file."""
    repo = root / "repo"
    (repo / "sub").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("one\ntwo\n")
    (repo / "sub" / "b.txt").write_text("b\n")
    (repo / ".gitignore").write_text("*.log\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "init")
    (repo / "a.txt").write_text("one\ntwo\nparent's uncommitted line\n")
    (repo / "untracked.txt").write_text("the parent's\n")
    (repo / "parent.log").write_text("ignored\n")
    return repo


def fingerprint(repo: Path) -> tuple[str, str, str, str]:
    """The parent as a user sees it: every file's bytes, the index, status and branches."""
    digest = hashlib.sha256()
    for path in sorted(p for p in repo.rglob("*") if ".git" not in p.relative_to(repo).parts):
        digest.update(str(path.relative_to(repo)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    index = hashlib.sha256((repo / ".git" / "index").read_bytes()).hexdigest()
    return digest.hexdigest(), index, git(repo, "status", "--porcelain"), git(repo, "stash", "list")


def registered(repo: Path) -> list[str]:
    lines = git(repo, "worktree", "list", "--porcelain").splitlines()
    return [line for line in lines if line.startswith("worktree ")]


def dsh_branches(repo: Path) -> list[str]:
    return git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/dsh/").split()


def left_over() -> list[str]:
    root = worktrees_root()
    return sorted(p.name for p in root.iterdir() if p.name != "locks") if root.exists() else []


def editing(*edits: tuple[str, str]) -> Any:
    """A fake product's script: write ``edits`` (path relative to its cwd, text), then answer."""

    def run(request: ResolvedStartRequest) -> SubagentResult:
        cwd = Path(request.parent.cwd or ".")
        for name, text in edits:
            (cwd / name).write_text(text)
        return SubagentResult(StopReason.COMPLETED, (TextBlock("edited"),))

    return run


def mount(provider: FakeProvider, **config: Any) -> tuple[SubagentTool, JobRegistry]:
    service = SubagentService()
    service.register(provider)
    jobs = JobRegistry()
    tool_config = SubagentToolConfig(
        provider=provider.name, max_depth="provider-managed", workspace="worktree", **config
    )
    return SubagentTool(tool_config, service, jobs), jobs


ASK = {"description": "edit", "prompt": "edit the files"}


async def test_a_run_keeps_exactly_its_edit_on_a_branch_and_the_parent_is_untouched(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path)
    before = fingerprint(repo)
    provider = FakeProvider(
        result=editing(("new.txt", "made\n"), ("../a.txt", "rewritten\n"), ("run.log", "x\n"))
    )
    tool, jobs = mount(provider)
    async with jobs:
        out = await tool.call(ASK, Caller("s1", str(repo / "sub")))
    assert not out.is_error, out.text
    # The product worked at the same relative cwd, in a worktree outside the parent's tree.
    (request,) = provider.requests
    cwd = Path(request.parent.cwd or "")
    assert cwd.name == "sub"
    assert repo not in cwd.parents
    assert worktrees_root() in cwd.parents
    (branch,) = dsh_branches(repo)
    assert branch.startswith("dsh/run-")
    assert (
        out.text
        == f"edited\nChanges: branch {branch} (2 files changed, 2 insertions(+), 2 deletions(-))"
    )
    facts = out.meta["workspace"] if out.meta else {}
    assert facts["branch"] == branch
    assert facts["files"] == ["a.txt", "sub/new.txt"]  # the ignored run.log is not kept
    assert facts["base"] == git(repo, "rev-parse", "HEAD").strip()  # HEAD: no uncommitted change
    assert git(repo, "rev-parse", branch).strip() == facts["commit"]
    assert git(repo, "show", f"{branch}:a.txt") == "rewritten\n"
    assert git(repo, "show", f"{branch}:sub/new.txt") == "made\n"
    assert git(repo, "rev-parse", f"{branch}~1").strip() == facts["base"]
    assert fingerprint(repo) == before
    assert len(registered(repo)) == 1
    assert left_over() == []


async def test_a_run_that_changed_nothing_leaves_no_branch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    tool, jobs = mount(FakeProvider(result=editing()))
    async with jobs:
        out = await tool.call(ASK, Caller("s1", str(repo)))
    assert out.text == "edited\nChanges: none"
    assert out.meta is not None
    assert out.meta["workspace"]["branch"] is None
    assert dsh_branches(repo) == []
    assert len(registered(repo)) == 1
    assert left_over() == []


async def test_working_tree_base_takes_the_uncommitted_changes_along(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    before = fingerprint(repo)
    seen: list[str] = []

    def run(request: ResolvedStartRequest) -> SubagentResult:
        cwd = Path(request.parent.cwd or "")
        seen.append((cwd / "a.txt").read_text())
        seen.append((cwd / "untracked.txt").read_text())
        seen.append(str((cwd / "parent.log").exists()))
        (cwd / "a.txt").write_text("run\n")
        return SubagentResult(StopReason.COMPLETED, (TextBlock("ok"),))

    tool, jobs = mount(FakeProvider(result=run), worktree_base="working-tree", branch_prefix="x/")
    async with jobs:
        out = await tool.call(ASK, Caller("s1", str(repo)))
    assert seen == ["one\ntwo\nparent's uncommitted line\n", "the parent's\n", "False"]
    assert out.meta is not None
    facts = out.meta["workspace"]
    assert facts["branch"].startswith("x/run-")
    assert facts["files"] == ["a.txt"]  # against the snapshot: the run's own change only
    # The snapshot commit sits between HEAD and the run's commit.
    assert git(repo, "rev-parse", f"{facts['branch']}~1").strip() == facts["base"]
    assert (
        git(repo, "rev-parse", f"{facts['base']}~1").strip()
        == git(repo, "rev-parse", "HEAD").strip()
    )
    assert git(repo, "show", f"{facts['base']}:untracked.txt") == "the parent's\n"
    assert fingerprint(repo) == before  # index, stash and files as they were
    assert left_over() == []


async def test_a_background_job_names_its_branch_after_itself(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    tool, jobs = mount(FakeProvider(result=editing(("new.txt", "job\n"))))
    caller = Caller("s1", str(repo))
    async with jobs:
        started = await tool.call({**ASK, "run_in_background": True}, caller)
        assert started.value is not None
        job_id = str(started.value["job_id"])
        snapshot = await jobs.wait(job_id, 10, caller)
        output = jobs.read(job_id, caller)
    assert snapshot.status is JobStatus.COMPLETED
    assert output.endswith(f"\nChanges: branch dsh/{job_id} (1 file changed, 1 insertion(+))")
    assert snapshot.meta is not None
    assert snapshot.meta["workspace"]["branch"] == f"dsh/{job_id}"
    assert dsh_branches(repo) == [f"dsh/{job_id}"]


@pytest.mark.parametrize("where", ["outside", "bare", "dot-git"])
async def test_a_cwd_without_a_work_tree_is_refused_before_anything_starts(
    tmp_path: Path, where: str
) -> None:
    if where == "outside":
        cwd = tmp_path / "plain"
        cwd.mkdir()
    elif where == "bare":
        git(tmp_path, "init", "-q", "--bare", "bare.git")
        cwd = tmp_path / "bare.git" / "refs"
    else:
        cwd = make_repo(tmp_path) / ".git"
    provider = FakeProvider()
    tool, jobs = mount(provider)
    async with jobs:
        out = await tool.call(ASK, Caller("s1", str(cwd)))
        background = await tool.call({**ASK, "run_in_background": True}, Caller("s1", str(cwd)))
    for result in (out, background):
        assert result.is_error
        assert result.text.startswith('workspace = "worktree": the working directory is ')
        assert str(tmp_path) not in result.text
    assert provider.requests == []
    assert not worktrees_root().exists()


@pytest.mark.parametrize("prefix", ["a..b/", "has space/", "-x", "x/.hidden/", "y.lock/", "a@{b"])
def test_a_branch_prefix_git_would_refuse_is_a_config_error(prefix: str) -> None:
    with pytest.raises(pydantic.ValidationError, match="branch_prefix"):
        SubagentToolConfig(provider="fake", workspace="worktree", branch_prefix=prefix)


async def test_a_cancelled_run_keeps_its_partial_edit_and_leaves_no_worktree(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path)
    edited = asyncio.Event()

    class Hanging(FakeProvider):
        async def start(self, request: ResolvedStartRequest) -> Any:
            run = await super().start(request)
            Path(request.parent.cwd or "", "half.txt").write_text("half done\n")  # noqa: ASYNC240
            edited.set()
            return run

    tool, jobs = mount(Hanging(delay=None))
    async with jobs:
        call = asyncio.create_task(tool.call(ASK, Caller("s1", str(repo))))
        await asyncio.wait_for(edited.wait(), 10)
        assert len(registered(repo)) == 2  # the run's worktree exists while it runs
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    (branch,) = dsh_branches(repo)
    assert git(repo, "show", f"{branch}:half.txt") == "half done\n"
    assert len(registered(repo)) == 1
    assert left_over() == []


_DYING_HOST = """
import asyncio, os, sys
from pathlib import Path
from dsh.tool_subagent._workspace import WorkspaceOptions
from dsh.tool_subagent._worktree import make_worktree

async def main():
    tree = await make_worktree(sys.argv[1], WorkspaceOptions("worktree"), "subagent-lost")
    Path(tree.cwd, "partial.txt").write_text("before the crash\\n")
    print(tree.cwd, flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""


def start_dying_host(repo: Path) -> tuple[subprocess.Popen[str], Path]:  # noqa: TID251
    """A process that made a worktree run, edited in it and now waits (to be SIGKILLed)."""
    host = subprocess.Popen(  # noqa: TID251 - a host to SIGKILL
        [sys.executable, "-c", _DYING_HOST, str(repo)],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    assert host.stdout is not None
    return host, Path(host.stdout.readline().strip())


async def test_a_killed_hosts_worktree_is_finished_by_the_next_sweep(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    host, cwd = start_dying_host(repo)
    try:
        assert (cwd / "partial.txt").is_file()
        assert await sweep_lost_worktrees() == []  # a live host's worktree is left alone
    finally:
        host.send_signal(signal.SIGKILL)
        host.wait(10)
    assert len(registered(repo)) == 2
    (changes,) = await sweep_lost_worktrees()
    assert changes.branch == "dsh/subagent-lost"
    assert git(repo, "show", "dsh/subagent-lost:partial.txt") == "before the crash\n"
    assert len(registered(repo)) == 1
    assert left_over() == []
    assert not cwd.exists()


async def test_eight_runs_at_once_on_one_repository_get_eight_branches(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    before = fingerprint(repo)

    def run(request: ResolvedStartRequest) -> SubagentResult:
        label = request.prompt[0].text if isinstance(request.prompt[0], TextBlock) else ""
        Path(request.parent.cwd or "", "a.txt").write_text(label + "\n")
        return SubagentResult(StopReason.COMPLETED, (TextBlock(label),))

    tool, jobs = mount(FakeProvider(result=run))
    caller = Caller("s1", str(repo))
    async with jobs:
        outs = await asyncio.gather(
            *(tool.call({"description": "edit", "prompt": f"run {n}"}, caller) for n in range(8))
        )
    by_text = {}
    for out in outs:
        assert not out.is_error, out.text
        assert out.meta is not None
        by_text[out.text.splitlines()[0]] = out.meta["workspace"]["branch"]
    assert len(set(by_text.values())) == 8
    for text, branch in by_text.items():
        assert git(repo, "show", f"{branch}:a.txt") == text + "\n"
    assert sorted(dsh_branches(repo)) == sorted(by_text.values())
    assert fingerprint(repo) == before
    assert len(registered(repo)) == 1
    assert left_over() == []


def test_the_changes_line_reads_like_gits_shortstat() -> None:
    one = Changes("b", "dsh/r", "c", ("a",), 1, 0)
    assert one.line == "Changes: branch dsh/r (1 file changed, 1 insertion(+))"
    gone = Changes("b", "dsh/r", "c", ("a", "b"), 0, 3)
    assert gone.line == "Changes: branch dsh/r (2 files changed, 3 deletions(-))"
    binary = Changes("b", "dsh/r", "c", ("img",), 0, 0)
    assert binary.diffstat == "1 file changed, 0 insertions(+), 0 deletions(-)"
    assert Changes("b").line == "Changes: none"
    assert Changes("b", kept=False).line.startswith("Changes: not kept")


async def test_a_cwd_in_a_linked_worktree_of_the_user_works_like_the_main_one(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path)
    git(repo, "worktree", "add", "-q", "--detach", str(tmp_path / "linked"))
    linked = tmp_path / "linked"
    tool, jobs = mount(FakeProvider(result=editing(("from-linked.txt", "x\n"))))
    async with jobs:
        out = await tool.call(ASK, Caller("s1", str(linked / "sub")))
    assert out.meta is not None
    branch = out.meta["workspace"]["branch"]
    assert git(repo, "show", f"{branch}:sub/from-linked.txt") == "x\n"  # one shared repository
    assert len(registered(repo)) == 2  # the user's own linked worktree only
    assert left_over() == []


async def test_a_failed_runs_text_ends_with_the_changes_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)

    def fail_after_edit(request: ResolvedStartRequest) -> SubagentResult:
        Path(request.parent.cwd or "", "partial.txt").write_text("some\n")
        return SubagentResult(StopReason.ERROR, (TextBlock("half"),), "the product gave up")

    tool, jobs = mount(FakeProvider(result=fail_after_edit))
    async with jobs:
        out = await tool.call(ASK, Caller("s1", str(repo)))
    assert out.is_error
    assert out.meta is not None
    branch = out.meta["workspace"]["branch"]
    assert out.text == (
        "subagent run failed\nDiagnostic: the product gave up\n"
        f"Partial output before the run ended:\nhalf\nChanges: branch {branch} "
        "(1 file changed, 1 insertion(+))"
    )
