"""Where a delegation works: the options, the checks made before anything is spawned, and what
comes back (docs/workspaces.md).

``shared`` runs the product in the caller's cwd (the default). ``worktree`` runs it in a git
worktree of the repository holding that cwd, made for the run in a dsh-owned directory; after
the run its changes are kept on a new branch (``_worktree``). Pure code: nothing here spawns.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Literal

__all__ = [
    "DEFAULT_BRANCH_PREFIX",
    "Changes",
    "Repository",
    "WorkspaceError",
    "WorkspaceOptions",
    "check_branch_prefix",
    "find_repository",
    "with_changes",
]

Workspace = Literal["shared", "worktree"]
WorktreeBase = Literal["head", "working-tree"]
DEFAULT_BRANCH_PREFIX = "dsh/"
_MAX_PREFIX = 100

#: What git's ``check-ref-format`` refuses anywhere in a ref name.
_BAD_REF_TEXT = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//")


class WorkspaceError(Exception):
    """A workspace that cannot be made, told in a fixed, model-safe text naming ``field``."""

    def __init__(self, message: str, *, field: str = "workspace") -> None:
        super().__init__(message)
        self.field = field


def check_branch_prefix(prefix: str) -> str:
    """``prefix`` if ``<prefix><run id>`` is a valid branch name (git's ref rules), else
    ``ValueError`` saying why."""
    if len(prefix) > _MAX_PREFIX:
        raise ValueError(f"branch_prefix is at most {_MAX_PREFIX} characters")
    name = prefix + "x"
    if _BAD_REF_TEXT.search(name) or name.startswith(("/", "-")):
        raise ValueError(
            "branch_prefix is not a valid git ref name (no spaces, control characters,"
            " '~^:?*[\\', '..', '@{' or '//', and no leading '/' or '-')"
        )
    for part in name.split("/"):
        if part.startswith(".") or part.endswith(".lock"):
            raise ValueError(
                "branch_prefix is not a valid git ref name (a part starts with '.' or ends"
                " with '.lock')"
            )
    return prefix


@dataclass(frozen=True, slots=True)
class WorkspaceOptions:
    """One delegation tool's workspace settings (``[[tool]]`` keys of the same names).

    ``worktree_base``: ``head`` starts the worktree at the parent's ``HEAD``; ``working-tree``
    also takes the parent's uncommitted changes (tracked and untracked, not ignored) along, as a
    snapshot commit made without touching the parent's index, stash or refs.
    """

    workspace: Workspace = "shared"
    worktree_base: WorktreeBase = "head"
    branch_prefix: str = DEFAULT_BRANCH_PREFIX

    def __post_init__(self) -> None:
        if self.workspace not in ("shared", "worktree"):
            raise ValueError('workspace must be "shared" or "worktree"')
        if self.worktree_base not in ("head", "working-tree"):
            raise ValueError('worktree_base must be "head" or "working-tree"')
        check_branch_prefix(self.branch_prefix)

    @property
    def worktree(self) -> bool:
        return self.workspace == "worktree"


@dataclass(frozen=True, slots=True)
class Repository:
    """The git work tree holding a cwd: its top directory and the cwd relative to it."""

    top: Path
    relative: PurePath

    @property
    def common_dir(self) -> Path:
        """The repository's shared git directory (the ``.git`` every worktree of it uses)."""
        dot_git = self.top / ".git"
        if dot_git.is_dir():
            return dot_git
        # A linked worktree or a submodule: ".git" is a file naming its git dir.
        text = dot_git.read_text(errors="replace").strip()
        git_dir = Path(text.removeprefix("gitdir:").strip())
        if not git_dir.is_absolute():
            git_dir = self.top / git_dir
        common = git_dir / "commondir"
        if common.is_file():
            shared = Path(common.read_text(errors="replace").strip())
            return (shared if shared.is_absolute() else git_dir / shared).resolve()
        return git_dir.resolve()


def _looks_bare(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir() and (path / "refs").is_dir()


def _is_work_tree_top(path: Path) -> bool:
    """Whether ``path/.git`` is what git takes for one: a git directory, or a ``gitdir:`` file
    (a linked worktree, a submodule). Anything else there is passed over, as git does."""
    dot_git = path / ".git"
    if dot_git.is_dir():
        return _looks_bare(dot_git)
    if dot_git.is_file():
        with contextlib.suppress(OSError):
            return dot_git.read_bytes()[:8] == b"gitdir: "
    return False


def find_repository(cwd: str | None) -> Repository:
    """The git work tree holding ``cwd`` (default: this process's), found by reading the
    filesystem only; raises :class:`WorkspaceError` (no path in its text) when there is none."""
    start = (Path(cwd) if cwd is not None else Path.cwd()).resolve()
    if not start.is_dir():
        raise WorkspaceError(
            'workspace = "worktree": the working directory does not exist', field="cwd"
        )
    for path in (start, *start.parents):
        if path.name == ".git" or _looks_bare(path):
            raise WorkspaceError(
                'workspace = "worktree": the working directory is inside a bare repository or'
                " a .git directory, which has no work tree to copy"
            )
        if _is_work_tree_top(path):
            return Repository(path, start.relative_to(path))
    raise WorkspaceError(
        'workspace = "worktree": the working directory is not inside a git repository'
    )


@dataclass(frozen=True, slots=True)
class Changes:
    """What a worktree run changed, against ``base``: kept on ``branch`` at ``commit``, or
    nothing (``branch`` is ``None``). ``kept`` is false when changes could not be committed."""

    base: str
    branch: str | None = None
    commit: str | None = None
    files: tuple[str, ...] = ()
    insertions: int = 0
    deletions: int = 0
    kept: bool = True

    @property
    def diffstat(self) -> str:
        """git's ``--shortstat`` words: ``3 files changed, 40 insertions(+), 2 deletions(-)``."""
        count = len(self.files)
        parts = [f"{count} file{'' if count == 1 else 's'} changed"]
        if self.insertions or not self.deletions:
            parts.append(f"{self.insertions} insertion{'' if self.insertions == 1 else 's'}(+)")
        if self.deletions or not self.insertions:
            parts.append(f"{self.deletions} deletion{'' if self.deletions == 1 else 's'}(-)")
        return ", ".join(parts)

    @property
    def line(self) -> str:
        """The one model-visible line: names only the branch dsh made and the counts."""
        if not self.kept:
            return "Changes: not kept (the worktree's changes could not be committed)"
        if self.branch is None:
            return "Changes: none"
        return f"Changes: branch {self.branch} ({self.diffstat})"

    def as_json(self) -> dict[str, Any]:
        return {
            "workspace": "worktree",
            "base": self.base,
            "branch": self.branch,
            "commit": self.commit,
            "files": list(self.files),
            "files_changed": len(self.files),
            "insertions": self.insertions,
            "deletions": self.deletions,
            "kept": self.kept,
        }


def with_changes(text: str, changes: Changes | None) -> str:
    """``text`` followed by the changes line (unchanged without a worktree)."""
    if changes is None:
        return text
    return f"{text}\n{changes.line}" if text else changes.line
