"""``workspace = "worktree"`` with the REAL products against the loopback models.

- Each product, in its edit-allowing mode, edits a file in its worktree through its own tool
  (Codex's command tool, Claude Code's Write): the run's branch holds exactly that edit, the
  parent's files, index, status and stash are byte-identical before and after, and no worktree
  stays registered or on disk.
- Eight worktree runs at once on one repository, both products mixed, all editing the same
  file: eight branches, each with its own edit, the parent untouched (2 rounds;
  ``DSH_FULL_VOLUME=1`` runs the issue's 5, docs/workspaces.md).
- A tool command writing the parent's checkout by absolute path, under each product's
  edit-allowing mode, is refused by the product (Codex's workspace-write sandbox, Claude Code's
  permission check answered by dsh), while its write inside the worktree lands on the branch.
- A run cancelled mid-run keeps its partial edit on its branch; a host SIGKILLed mid-run leaves
  a worktree that the next sweep finishes, after the orphan reap ended the product (a ``/proc``
  walk finds the product in the worktree before, and nothing there after).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.subagent_codex.testing import FakeResponsesServer, write_codex_home
from dsh.subagent_codex.testing import hermetic_env as codex_env
from dsh.tool_subagent import Caller, Harness, ToolResult
from dsh.tool_subagent._worktree import sweep_lost_worktrees, worktrees_root

pytestmark = pytest.mark.real_product

PRODUCTS = ("codex", "claude-code")
ROUNDS = 5 if os.environ.get("DSH_FULL_VOLUME") == "1" else 2


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(  # noqa: TID251
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def parent_repo(root: Path) -> Path:
    """A repository whose parent checkout has uncommitted, untracked and ignored files."""
    repo = root / "parent"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "shared.txt").write_text("base\n")
    (repo / ".gitignore").write_text("*.log\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    (repo / "shared.txt").write_text("base\nthe parent's own uncommitted line\n")
    (repo / "notes.txt").write_text("untracked\n")
    (repo / "build.log").write_text("ignored\n")
    return repo


def state_of(repo: Path) -> tuple[str, str, str, str]:
    """The parent as its user sees it: the work tree's bytes, the index, status, stash."""
    digest = hashlib.sha256()
    for path in sorted(repo.rglob("*")):
        if ".git" in path.relative_to(repo).parts:
            continue
        digest.update(os.fsencode(path.relative_to(repo)))
        if path.is_file():
            digest.update(path.read_bytes())
    index = hashlib.sha256((repo / ".git" / "index").read_bytes()).hexdigest()
    return digest.hexdigest(), index, git(repo, "status", "--porcelain"), git(repo, "stash", "list")


def worktrees_of(repo: Path) -> list[str]:
    return [
        line
        for line in git(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]


def dirs_left() -> list[str]:
    root = worktrees_root()
    return sorted(p.name for p in root.iterdir() if p.name != "locks") if root.exists() else []


def working_in_worktrees() -> list[int]:
    """Processes whose cwd is inside dsh's worktrees (a ``/proc`` walk; no dsh bookkeeping)."""
    root = str(worktrees_root())
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.cwd().startswith(root):
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@dataclass
class Models:
    root: Path
    codex: FakeResponsesServer
    claude: FakeMessagesServer

    def profile(self, **tool: Any) -> dict[str, Any]:
        home = write_codex_home(self.root / "codex-home", self.codex.base_url, "mock-model")
        claude = claude_env(self.root / "claude", self.claude.base_url)
        common = {"stderr": "discard", "dispose_grace_ms": 1000}
        return {
            "provider": [
                {
                    "kind": "codex",
                    "config": common
                    | {"permission_mode": "approve-for-me", "env": codex_env(home)},
                },
                {
                    "kind": "claude-code",
                    "config": common | {"permission_mode": "acceptEdits", "env": claude},
                },
            ],
            "tool": [
                {"provider": name, "tool_name": name.replace("-", "_"), "workspace": "worktree"}
                | tool
                for name in PRODUCTS
            ],
        }

    def edit(self, product: str, task: str, text: str, *, then: str = "answer") -> None:
        """Script ``product``'s model for ``task``: write ``edit.txt`` with its own edit tool,
        then answer (or stall: a run that is still going)."""
        if product == "codex":
            command = f"printf '%s\\n' '{text}' > edit.txt"
            self.codex.queue_tool_call("exec_command", {"cmd": command, "login": False}, match=task)
            if then == "answer":
                self.codex.queue_text(f"wrote {text}", match=task)
            else:
                self.codex.queue_stall(match=task)
        else:
            self.claude.queue_tool_call(
                "Write", {"file_path": "edit.txt", "content": text + "\n"}, match=task
            )
            if then == "answer":
                self.claude.queue_text(f"wrote {text}", match=task)
            else:
                self.claude.queue_stall(match=task)


@pytest.fixture
async def models(tmp_path: Path) -> AsyncIterator[Models]:
    async with FakeResponsesServer() as codex:
        with FakeMessagesServer() as claude:
            yield Models(tmp_path, codex, claude)


async def delegate(harness: Harness, product: str, task: str, cwd: Path) -> ToolResult:
    tool = harness.tool(product.replace("-", "_"))
    return await tool.call({"description": "edit", "prompt": task}, Caller("wt", str(cwd)))


def assert_only_edit(repo: Path, out: ToolResult, text: str) -> str:
    """The run's branch holds exactly ``edit.txt`` = ``text``; returns the branch."""
    assert not out.is_error, out.text
    assert out.meta is not None
    facts = out.meta["workspace"]
    branch = facts["branch"]
    assert out.text.endswith(f"\nChanges: branch {branch} (1 file changed, 1 insertion(+))")
    assert facts["files"] == ["edit.txt"]
    assert git(repo, "show", f"{branch}:edit.txt") == text + "\n"
    assert git(repo, "diff", "--name-only", facts["base"], branch).split() == ["edit.txt"]
    assert facts["base"] == git(repo, "rev-parse", "HEAD").strip()
    return str(branch)


@pytest.mark.parametrize("product", PRODUCTS)
@pytest.mark.timeout(120)
async def test_the_products_edit_lands_on_its_branch_and_the_parent_is_untouched(
    models: Models, product: str
) -> None:
    repo = parent_repo(models.root)
    before = state_of(repo)
    models.edit(product, "make the edit", f"{product} was here")
    async with Harness.from_profile(models.profile()) as harness:
        out = await delegate(harness, product, "make the edit", repo)
    assert_only_edit(repo, out, f"{product} was here")
    assert out.text.startswith(f"wrote {product} was here\n")
    assert state_of(repo) == before
    assert len(worktrees_of(repo)) == 1
    assert dirs_left() == []


@pytest.mark.timeout(600)
async def test_eight_runs_at_once_both_products_each_get_their_own_branch(models: Models) -> None:
    repo = parent_repo(models.root)
    before = state_of(repo)
    async with Harness.from_profile(models.profile()) as harness:
        for round_ in range(ROUNDS):
            runs = [(PRODUCTS[n % 2], f"round {round_} edit {n}") for n in range(8)]
            for product, task in runs:
                models.edit(product, task, task.replace(" ", "-"))
            outs = await asyncio.gather(
                *(delegate(harness, product, task, repo) for product, task in runs)
            )
            branches = {
                assert_only_edit(repo, out, task.replace(" ", "-"))
                for (_, task), out in zip(runs, outs, strict=True)
            }
            assert len(branches) == 8
            assert state_of(repo) == before
            assert len(worktrees_of(repo)) == 1
            assert dirs_left() == []
    assert len(git(repo, "branch", "--list", "dsh/*").split()) == 8 * ROUNDS


@pytest.mark.timeout(120)
async def test_a_cancelled_run_keeps_its_partial_edit_and_leaves_nothing(models: Models) -> None:
    repo = parent_repo(models.root)
    before = state_of(repo)
    models.edit("claude-code", "edit then think", "half done", then="stall")
    async with Harness.from_profile(models.profile()) as harness:
        call = asyncio.create_task(delegate(harness, "claude-code", "edit then think", repo))
        for _ in range(600):  # the edit is on disk in the worktree: the run is mid-way
            edited = list(worktrees_root().glob("*/*/edit.txt"))
            if edited:
                break
            await asyncio.sleep(0.05)
        assert edited, "the product never made its edit"
        assert working_in_worktrees()  # the product runs there now
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    assert working_in_worktrees() == []
    (branch,) = git(repo, "branch", "--list", "--format=%(refname:short)", "dsh/*").split()
    assert git(repo, "show", f"{branch}:edit.txt") == "half done\n"
    assert state_of(repo) == before
    assert len(worktrees_of(repo)) == 1
    assert dirs_left() == []


_HOST = """
import asyncio, json, sys
from dsh.tool_subagent import Caller, Harness

async def main():
    profile, cwd = json.loads(sys.argv[1]), sys.argv[2]
    async with Harness.from_profile(profile) as harness:
        await harness.tool("codex").call(
            {"description": "edit", "prompt": "edit then hang"}, Caller("host", cwd)
        )

asyncio.run(main())
"""


@pytest.mark.timeout(120)
async def test_a_sigkilled_hosts_worktree_is_finished_by_the_sweep_after_the_reap(
    models: Models,
) -> None:
    repo = parent_repo(models.root)
    before = state_of(repo)
    models.edit("codex", "edit then hang", "before the crash", then="stall")
    profile = json.dumps(models.profile())
    host = await asyncio.create_subprocess_exec(  # noqa: TID251 - a host to SIGKILL
        sys.executable, "-c", _HOST, profile, str(repo), env=dict(os.environ)
    )
    try:
        for _ in range(600):
            if list(worktrees_root().glob("*/*/edit.txt")) and working_in_worktrees():
                break
            await asyncio.sleep(0.05)
        assert working_in_worktrees(), "the product never ran in its worktree"
        assert list(worktrees_root().glob("*/*/edit.txt"))
    finally:
        host.send_signal(signal.SIGKILL)
        await host.wait()
    # The host's supervisor ends its product as the host dies (containment); the worktree stays
    # registered and on disk until a sweep finishes it.
    assert len(worktrees_of(repo)) == 2
    (changes,) = await sweep_lost_worktrees()
    assert working_in_worktrees() == []
    assert changes.branch is not None
    assert changes.files == ("edit.txt",)
    assert git(repo, "show", f"{changes.branch}:edit.txt") == "before the crash\n"
    assert state_of(repo) == before
    assert len(worktrees_of(repo)) == 1
    assert dirs_left() == []


@pytest.fixture
def parent_off_tmp() -> Any:
    """A parent repository outside ``/tmp``: Codex's workspace-write sandbox lets every command
    write ``/tmp`` (and ``$TMPDIR``), so a parent there would be writable for that reason alone
    (docs/workspaces.md)."""
    root = Path(tempfile.mkdtemp(prefix="dsh-reach-", dir="/var/tmp"))
    try:
        yield parent_repo(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def tool_outputs(models: Models, product: str) -> list[str]:
    """What the product's tools answered the model: the tool results in the last request the
    model server got (each request carries the conversation so far)."""
    if product == "codex":
        items = (models.codex.requests[-1].body or {}).get("input", [])
        return [str(i.get("output")) for i in items if i.get("type") == "function_call_output"]
    messages = (models.claude.requests[-1].body or {}).get("messages", [])
    return [
        str(block.get("content"))
        for message in messages
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


@pytest.mark.parametrize("product", PRODUCTS)
@pytest.mark.timeout(120)
async def test_a_write_to_the_parent_by_absolute_path_is_refused_by_the_product(
    models: Models, parent_off_tmp: Path, product: str
) -> None:
    repo = parent_off_tmp
    before = state_of(repo)
    target = repo / "shared.txt"
    task = "write outside"
    if product == "codex":
        command = f"echo inside > inside.txt; echo pwned > {target}"
        models.codex.queue_tool_call("exec_command", {"cmd": command, "login": False}, match=task)
    else:
        claude = models.claude
        claude.queue_tool_call(
            "Write", {"file_path": "inside.txt", "content": "inside\n"}, match=task
        )
        bash = {"command": f"echo pwned > {target}", "description": "write"}
        claude.queue_tool_call("Bash", bash, match=task)
        new_file = {"file_path": str(repo / "planted.txt"), "content": "pwned\n"}
        claude.queue_tool_call("Write", new_file, match=task)
    (models.codex if product == "codex" else models.claude).queue_text("tried", match=task)
    async with Harness.from_profile(models.profile()) as harness:
        out = await delegate(harness, product, task, repo)
    assert not out.is_error, out.text
    outputs = tool_outputs(models, product)
    if product == "codex":
        (output,) = outputs
        assert "Read-only file system" in output  # the sandbox refused the write
    else:
        written, *refused = outputs
        assert "created successfully" in written
        assert len(refused) == 2
        assert all("cannot request human approval" in text for text in refused), refused
    assert state_of(repo) == before  # shared.txt as it was, no planted.txt
    assert target.read_text() == "base\nthe parent's own uncommitted line\n"
    assert out.meta is not None
    branch = out.meta["workspace"]["branch"]
    assert out.meta["workspace"]["files"] == ["inside.txt"]  # the command did run
    assert git(repo, "show", f"{branch}:inside.txt") == "inside\n"
