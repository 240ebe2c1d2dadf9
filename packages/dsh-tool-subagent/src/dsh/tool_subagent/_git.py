"""Running ``git`` for a delegation's worktree: one bounded command, its output, its failure.

Spawned through ``dsh.subprocess`` like every process dsh starts. The repository is always
named by the command's ``cwd``: the ``GIT_*`` variables that would point git elsewhere are
removed, and no prompt or optional lock is taken (a ``git status`` of the parent's checkout never
writes its index). What git printed goes to :class:`GitFailed` and DEBUG logs, never to a model.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path

from dsh.subprocess import Collect, SpawnSpec, default_runtime

__all__ = ["GIT_TIMEOUT_S", "GitFailed", "git"]

logger = logging.getLogger("dsh.tool_subagent")

#: One git command's wall-clock bound (a ``git add -A`` of a very large tree included).
GIT_TIMEOUT_S = 120.0
_MAX_STDOUT = 8 << 20
_MAX_STDERR = 16 << 10

#: Names that would make git read another repository, index or object store than ``cwd``'s.
_REDIRECTS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
)
_BASE_ENV: dict[str, str | None] = {
    **dict.fromkeys(_REDIRECTS),
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
    "LC_ALL": "C",
}


class GitFailed(Exception):
    """A git command exited non-zero or ran out of time. ``stderr`` is git's raw text: for the
    ``__cause__`` chain and DEBUG logs only."""

    def __init__(self, command: str, exit_code: int | None, stderr: str) -> None:
        super().__init__(f"git {command} failed (exit code {exit_code})")
        self.command = command
        self.exit_code = exit_code
        self.stderr = stderr


async def git(
    cwd: Path | str,
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout_s: float = GIT_TIMEOUT_S,
) -> str:
    """Run ``git <args>`` in ``cwd`` and return its stdout; raises :class:`GitFailed`."""
    spec = SpawnSpec(
        argv=("git", *args),
        cwd=str(cwd),
        env={**_BASE_ENV, **(env or {})},
        stdout=Collect(_MAX_STDOUT),
        stderr=Collect(_MAX_STDERR),
        grace_ms=1000,
    )
    process = await default_runtime().spawn(spec)
    exit_code: int | None = None
    try:
        async with asyncio.timeout(timeout_s):
            exit_code = (await process.wait()).exit_code
    except TimeoutError:
        pass
    finally:
        await process.aclose()
    if exit_code != 0:
        stderr = process.collected("stderr").text
        logger.debug("git %s exited %s: %s", args[0], exit_code, stderr.strip())
        raise GitFailed(args[0], exit_code, stderr)
    return process.collected("stdout").text
