"""A delegation's git worktree: made before the product starts, its changes kept on a new
branch once the product's whole tree has exited, then removed and unregistered, in every ending.

Layout: ``$XDG_STATE_HOME/dsh/worktrees/dsh-worktree-<pid>-<start>-<random>/`` holds the
worktree (named for the run) and ``plan.json`` (repository, base commit, branch). ``<pid>`` and
``<start>`` name the process that made it: when that process is gone (a SIGKILLed host), the
next worktree run's sweep finishes the run the same way (changes onto the branch, worktree
removed), after the orphan reap ended any product process left writing there.

Git's own lock files make concurrent ``worktree add`` / ``remove`` on one repository fail, so
those steps hold a lock of this user per repository (``flock``, released when its holder dies).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path, PurePath

from dsh.jobs import Holder, default_store_path, this_process
from dsh.subagent.kit import CloseOnce
from dsh.subprocess import reap_orphans
from dsh.tool_subagent._git import GitFailed, git
from dsh.tool_subagent._workspace import Changes, WorkspaceError, WorkspaceOptions, find_repository

__all__ = [
    "Worktree",
    "finish_worktree",
    "make_worktree",
    "sweep_lost_worktrees",
    "worktrees_root",
]

logger = logging.getLogger("dsh.tool_subagent")

PLAN_FILE = "plan.json"
_CONTAINER = re.compile(r"dsh-worktree-([0-9]+)-([0-9]+)-[0-9a-f]+")
_LOCK_POLL_S = 0.01
_FALLBACK_IDENTITY = {
    "GIT_AUTHOR_NAME": "dsh",
    "GIT_AUTHOR_EMAIL": "dsh@localhost",
    "GIT_COMMITTER_NAME": "dsh",
    "GIT_COMMITTER_EMAIL": "dsh@localhost",
}
_MAKE_FAILED = (
    'workspace = "worktree": git could not make the worktree for this run (stage: workspace)'
)
_NO_COMMIT = 'workspace = "worktree": the repository has no commit to start a worktree from'


def worktrees_root() -> Path:
    """Where worktrees are made: ``worktrees`` beside the default job store."""
    return default_store_path().parent / "worktrees"


@dataclass(frozen=True, slots=True)
class Worktree:
    """One run's worktree. ``repo`` is the parent's work tree top (git commands on the
    repository run there), ``container`` the dsh-owned directory holding ``tree``."""

    repo: Path
    common_dir: Path
    container: Path
    tree: Path
    relative: PurePath
    base: str
    branch: str

    @property
    def cwd(self) -> str:
        """The parent's cwd, at the same place inside the worktree."""
        return str(self.tree / self.relative)

    def plan(self) -> bytes:
        fields = {
            "repo": str(self.repo),
            "common_dir": str(self.common_dir),
            "tree": self.tree.name,
            "relative": str(self.relative),
            "base": self.base,
            "branch": self.branch,
        }
        return json.dumps(fields).encode()

    @classmethod
    def from_plan(cls, container: Path) -> Worktree | None:
        try:
            fields = json.loads((container / PLAN_FILE).read_bytes())
            return cls(
                Path(fields["repo"]),
                Path(fields["common_dir"]),
                container,
                container / fields["tree"],
                PurePath(fields["relative"]),
                str(fields["base"]),
                str(fields["branch"]),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None


@contextlib.asynccontextmanager
async def _repository_lock(common_dir: Path) -> AsyncIterator[None]:
    """This user's lock on one repository's worktree list (every dsh process shares it)."""
    locks = worktrees_root() / "locks"
    locks.mkdir(mode=0o700, parents=True, exist_ok=True)
    name = hashlib.sha256(os.fsencode(common_dir)).hexdigest()[:32] + ".lock"
    fd = os.open(locks / name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(_LOCK_POLL_S)
        yield
    finally:
        os.close(fd)


async def _commit_of(cwd: Path, rev: str) -> str:
    return (await git(cwd, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")).strip()


async def _tree_of(cwd: Path, commit: str) -> str:
    return (await git(cwd, "rev-parse", "--verify", f"{commit}^{{tree}}")).strip()


async def _commit(cwd: Path, tree: str, parent: str, message: str) -> str:
    """A commit object of ``tree`` on ``parent`` (plumbing: no hook of the repository runs), by
    the repository's configured identity, else ``dsh <dsh@localhost>``."""
    try:
        await git(cwd, "config", "--get", "user.email")
        env = None
    except GitFailed:
        env = _FALLBACK_IDENTITY
    return (await git(cwd, "commit-tree", tree, "-p", parent, "-m", message, env=env)).strip()


async def _snapshot(top: Path, head: str, container: Path) -> str:
    """A commit of the parent's work tree as it is (tracked and untracked files, not ignored
    ones) on ``head``, built in a private index: the parent's index, stash and refs stay as
    they were. ``head`` itself when nothing is uncommitted."""
    index = container / "snapshot.index"
    parent_index = top / ".git" / "index"
    if parent_index.is_file():  # its stat data spares hashing every unchanged file again
        await asyncio.to_thread(shutil.copyfile, parent_index, index)
    env = {"GIT_INDEX_FILE": str(index)}
    if not index.exists():
        await git(top, "read-tree", head, env=env)
    await git(top, "add", "-A", "--", ":/", env=env)
    tree = (await git(top, "write-tree", env=env)).strip()
    index.unlink(missing_ok=True)
    if tree == await _tree_of(top, head):
        return head
    return await _commit(top, tree, head, "dsh: the parent's uncommitted changes")


async def make_worktree(cwd: str | None, options: WorkspaceOptions, name: str) -> Worktree:
    """The run's worktree, detached at the parent's ``HEAD`` (or a snapshot of its work tree),
    with the parent's cwd made inside it. Raises :class:`WorkspaceError`; whatever was made
    before a failure or a cancellation is removed again."""
    repo = find_repository(cwd)
    await sweep_lost_worktrees_once()
    root = worktrees_root()
    holder = this_process()
    try:
        common_dir = repo.common_dir
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        container = root / f"dsh-worktree-{holder.pid}-{holder.start}-{secrets.token_hex(6)}"
        container.mkdir(mode=0o700)
    except OSError as exc:
        raise WorkspaceError(_MAKE_FAILED) from exc
    worktree: Worktree | None = None
    try:
        try:
            head = await _commit_of(repo.top, "HEAD")
        except GitFailed as exc:
            raise WorkspaceError(_NO_COMMIT) from exc
        base = head
        if options.worktree_base == "working-tree":
            base = await _snapshot(repo.top, head, container)
        branch = options.branch_prefix + name
        worktree = Worktree(
            repo.top, common_dir, container, container / name, repo.relative, base, branch
        )
        (container / PLAN_FILE).write_bytes(worktree.plan())
        async with _repository_lock(common_dir):
            await git(repo.top, "worktree", "add", "--detach", "--quiet", str(worktree.tree), base)
        # A cwd git does not track (an empty or ignored directory) is made, empty.
        Path(worktree.cwd).mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - one mkdir
    except BaseException as exc:
        made = worktree or Worktree(
            repo.top, common_dir, container, container, repo.relative, "", ""
        )
        await CloseOnce().run(lambda: _remove(made))
        if isinstance(exc, (GitFailed, OSError)):
            raise WorkspaceError(_MAKE_FAILED) from exc
        raise
    return worktree


def _numstat(text: str) -> tuple[tuple[str, ...], int, int]:
    """Files, insertions and deletions of ``git diff --numstat -z --no-renames``."""
    files, insertions, deletions = [], 0, 0
    for entry in text.split("\0"):
        added, _, rest = entry.partition("\t")
        removed, _, path = rest.partition("\t")
        if not path:
            continue
        files.append(path)
        insertions += int(added) if added.isdigit() else 0  # "-" for a binary file
        deletions += int(removed) if removed.isdigit() else 0
    return tuple(files), insertions, deletions


async def _keep(worktree: Worktree) -> Changes:
    """Commit what the run left in the worktree (untracked files included, ignored ones not)
    and put it on the run's new branch; what the product committed itself is kept too."""
    if not (worktree.tree / ".git").exists():
        return Changes(base=worktree.base)
    tree_dir = worktree.tree
    await git(tree_dir, "add", "-A", "--", ":/")
    tree = (await git(tree_dir, "write-tree")).strip()
    head = await _commit_of(tree_dir, "HEAD")
    final = head
    if tree != await _tree_of(tree_dir, head):
        final = await _commit(tree_dir, tree, head, f"dsh: changes of run {tree_dir.name}")
    if final == worktree.base:
        return Changes(base=worktree.base)
    ref = f"refs/heads/{worktree.branch}"
    await git(worktree.repo, "update-ref", "-m", "dsh: worktree run", ref, final, "")
    numstat = await git(
        worktree.repo, "diff", "--numstat", "-z", "--no-renames", worktree.base, final
    )
    files, insertions, deletions = _numstat(numstat)
    return Changes(worktree.base, worktree.branch, final, files, insertions, deletions)


async def _remove(worktree: Worktree) -> None:
    """Unregister and delete the worktree and its container (best effort, each step)."""
    registered = worktree.common_dir / "worktrees" / worktree.tree.name
    try:
        async with _repository_lock(worktree.common_dir):
            if worktree.tree != worktree.container and worktree.tree.exists():
                with contextlib.suppress(GitFailed):
                    await git(
                        worktree.repo,
                        "worktree",
                        "remove",
                        "--force",
                        "--force",
                        str(worktree.tree),
                    )
            await asyncio.to_thread(shutil.rmtree, worktree.container, True)
            if registered.exists():
                await git(worktree.repo, "worktree", "prune")
    except (GitFailed, OSError):
        logger.debug("removing worktree %s failed", worktree.tree, exc_info=True)
        await asyncio.to_thread(shutil.rmtree, worktree.container, True)


async def finish_worktree(worktree: Worktree) -> Changes:
    """Keep the run's changes on its branch, then remove the worktree. Runs to its end when the
    caller is cancelled meanwhile (and then re-raises the cancellation)."""
    kept: list[Changes] = []

    async def finish() -> None:
        try:
            kept.append(await _keep(worktree))
        finally:
            await _remove(worktree)

    failure = await CloseOnce().run(finish)
    if kept:
        return kept[0]
    logger.debug("keeping the changes of worktree %s failed", worktree.tree, exc_info=failure)
    return Changes(base=worktree.base, kept=False)


def _lost(root: Path) -> list[Path]:
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    lost = []
    for path in entries:
        match = _CONTAINER.fullmatch(path.name)
        if match is None or path.is_symlink() or not path.is_dir():
            continue
        if not Holder(int(match[1]), int(match[2])).is_alive():
            lost.append(path)
    return sorted(lost)


async def sweep_lost_worktrees(root: Path | None = None) -> list[Changes]:
    """Finish the worktrees whose making process is gone: the orphan reap first (no product
    process is left writing there), then each one's changes onto its branch, then removal."""
    lost = _lost(root or worktrees_root())
    if not lost:
        return []
    await asyncio.to_thread(reap_orphans)
    finished = []
    for container in lost:
        claim = container / "sweep.lock"
        try:
            fd = os.open(claim, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            continue  # removed meanwhile by another sweep
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # another process sweeps this one
        try:
            worktree = Worktree.from_plan(container)
            if worktree is None:
                await asyncio.to_thread(shutil.rmtree, container, True)
                continue
            finished.append(await finish_worktree(worktree))
        finally:
            os.close(fd)
    return finished


_swept = False


async def sweep_lost_worktrees_once() -> None:
    """:func:`sweep_lost_worktrees` at this process's first worktree run; failures are logged."""
    global _swept
    if _swept:
        return
    _swept = True
    try:
        finished = await sweep_lost_worktrees()
    except Exception:
        logger.debug("sweeping lost worktrees failed", exc_info=True)
        return
    if finished:
        logger.debug("finished %d worktree(s) of dead processes", len(finished))
