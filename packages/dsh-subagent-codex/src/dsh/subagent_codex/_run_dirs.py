"""``isolation = "private"``: a fresh Codex home per run and per warm process.

Each ``codex app-server`` gets one owner-named dir ``dsh-codex-<pid>-<start>-<random>`` (see
``dsh.subagent.kit``'s owned dirs) holding its ``CODEX_HOME`` (the ``home_template``'s copy),
its ``CODEX_SQLITE_HOME`` and its ``HOME`` (empty: Codex snapshots the login shell from
``$HOME`` before the first command, and a tool command finds no ``~/.gitconfig`` or ``~/.ssh``
of the host user there). The run removes the dir after whole-tree exit; the provider's first
start in a process sweeps the dirs of dead owners (the kit's ``ProductProvider``, by
``PRIVATE_DIR_TAG``). A forwarded key is logged in through the app-server's own
``account/login/start`` into its in-memory credential store (``_auth``), so it is written
nowhere, not even here.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from dsh.subagent.kit import copy_home_template, make_off_loop, make_owned_dir
from dsh.subagent_codex.config import CodexProviderConfig

__all__ = [
    "PRIVATE_DIR_TAG",
    "make_private_dir",
    "private_overlay",
]

PRIVATE_DIR_TAG = "codex"
_CODEX_HOME = "codex-home"
_SQLITE_HOME = "sqlite"
_HOME = "home"


def _make(config: CodexProviderConfig) -> str:
    root = make_owned_dir(PRIVATE_DIR_TAG)
    try:
        for name in (_CODEX_HOME, _SQLITE_HOME, _HOME):
            (Path(root) / name).mkdir(mode=0o700)
        copy_home_template(config.home_template, Path(root) / _CODEX_HOME)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root


async def make_private_dir(config: CodexProviderConfig) -> str:
    """A fresh private dir for one app-server (made off the loop; never leaked on cancel)."""
    return await make_off_loop(lambda: _make(config), lambda root: root)


def private_overlay(root: str) -> dict[str, str | None]:
    """The env names that point the app-server into ``root`` (set over everything else)."""
    return {
        "CODEX_HOME": str(Path(root) / _CODEX_HOME),
        "CODEX_SQLITE_HOME": str(Path(root) / _SQLITE_HOME),
        "HOME": str(Path(root) / _HOME),
    }
