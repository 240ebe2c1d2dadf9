"""``store_for``: the job store a ``[jobs]`` table names, and where the default one lives."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from dsh.jobs._sqlite_store import SqliteJobStore
from dsh.jobs._store import JobStore, MemoryJobStore
from dsh.jobs._types import JobsConfig

__all__ = ["MEMORY_STORE", "default_store_path", "store_for", "store_path"]

MEMORY_STORE = "memory"


def default_store_path(environ: Mapping[str, str] | None = None) -> Path:
    """The OS user's job store: ``$XDG_STATE_HOME/dsh/jobs.sqlite3``, where an unset or
    relative ``XDG_STATE_HOME`` means ``~/.local/state`` (the XDG base directory rules)."""
    env = os.environ if environ is None else environ
    state = env.get("XDG_STATE_HOME", "")
    base = Path(state) if state and Path(state).is_absolute() else Path.home() / ".local" / "state"
    return base / "dsh" / "jobs.sqlite3"


def store_path(config: JobsConfig) -> Path | None:
    """The file ``config.store`` names, or ``None`` for the memory store."""
    if config.store == MEMORY_STORE:
        return None
    if config.store == "default":
        return default_store_path()
    return Path(config.store).expanduser()


def store_for(config: JobsConfig) -> JobStore:
    """Open the store ``config.store`` names. A file store is checked as it opens and raises
    :class:`~dsh.jobs.errors.JobStoreError` naming the path and what to do."""
    days, count = config.retention_days, config.retention_count
    path = store_path(config)
    if path is None:
        return MemoryJobStore(retention_days=days, retention_count=count)
    return SqliteJobStore(path, retention_days=days, retention_count=count)
