"""One first start per ``CODEX_HOME`` and Codex version at a time, across processes.

Codex creates and migrates its state databases when a process starts. Two first starts on one
fresh home race, and the loser exits with status 1 before it answers ``initialize`` (16 at once
on a fresh home: 27 of 32 failed; the same after every Codex version bump, which migrates again).
Once one start has finished, concurrent starts are safe (0 of 32 failed).

So the first start of a version on a home holds an exclusive ``flock`` from its spawn until its
``initialize`` answer, then leaves a marker naming the version; every later start sees the marker
with one ``stat`` and takes no lock. A private ``CODEX_SQLITE_HOME`` per run also avoids the race,
but costs 70 to 150 ms per run (measured), against nothing here after the first start.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

__all__ = ["first_start_guard"]

_log = logging.getLogger("dsh.subagent_codex")
_LOCK_NAME = ".dsh-first-start.lock"
_POLL_S = 0.02
_MAX_WAIT_S = 60.0
"""A lock holder that never finishes (a stuck or stopped process) does not hold others forever."""


def _marker(home: Path, version: str) -> Path:
    return home / f".dsh-started-{version}"


@contextlib.asynccontextmanager
async def first_start_guard(home: Path, version: str) -> AsyncIterator[None]:
    """Hold the home's first-start lock around the body unless this version started there before.

    The marker is written only when the body finishes without an exception. Where the home does
    not exist or cannot be written, nothing is locked (Codex reports that itself).
    """
    marker = _marker(home, version)
    if marker.exists():
        yield
        return
    try:
        fd = os.open(home / _LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        yield
        return
    try:
        await _acquire(fd)
        if marker.exists():
            fcntl.flock(fd, fcntl.LOCK_UN)  # someone finished the first start while we waited
            yield
            return
        yield
        with contextlib.suppress(OSError):
            marker.touch()
    finally:
        os.close(fd)  # releases the lock


async def _acquire(fd: int) -> None:
    deadline = time.monotonic() + _MAX_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                _log.warning("Codex first-start lock not released in %.0f s; going on", _MAX_WAIT_S)
                return
            await asyncio.sleep(_POLL_S)
