"""Run dirs: ``dsh-claude-<pid>-<start>-<random>``, and the sweep of a dead owner's.

Each Claude Code run owns a fresh directory in the system temporary directory (its private
``TMPDIR``, the Bash-tool env script and, under ``isolation = "private"``, its private ``HOME``
and ``CLAUDE_CONFIG_DIR``); the run removes it after whole-tree exit, and the provider's first
start in a process sweeps the ones a dead owner left (the kit's ``ProductProvider``, by
``RUN_DIR_TAG``).
"""

from __future__ import annotations

import os

from dsh.subagent.kit import owned_dir_prefix, sweep_lost_dirs

__all__ = ["RUN_DIR_TAG", "run_dir_prefix", "sweep_lost_run_dirs"]

RUN_DIR_TAG = "claude"


def run_dir_prefix() -> str:
    """``dsh-claude-<this pid>-<this process's start ticks>-``."""
    return owned_dir_prefix(RUN_DIR_TAG)


def sweep_lost_run_dirs(root: str | os.PathLike[str] | None = None) -> list[str]:
    """Remove the run dirs under ``root`` (default: the temporary directory) whose owner is gone;
    return their names."""
    return sweep_lost_dirs(RUN_DIR_TAG, root)
