"""The threads that run dsh.subprocess's blocking work: forks and process-table scans.

A private pool rather than the event loop's default executor (six threads on a 2-CPU machine), so
spawning and whole-tree tracking never queue behind an application's own blocking work, and an
application that fills its executor cannot stall a teardown.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

__all__ = ["offload", "submit"]

_T = TypeVar("_T")
_MAX_WORKERS = 4
"""Scans serialize on one lock anyway; four threads leave room for forks in flight."""

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_MAX_WORKERS, thread_name_prefix="dsh-subprocess")
        return _pool


def submit(func: Callable[..., _T], *args: object) -> Future[_T]:
    """Queue ``func(*args)`` in the pool (``Future.cancel()`` succeeds only before it starts)."""
    return _executor().submit(func, *args)


def offload(func: Callable[..., _T], *args: object) -> asyncio.Future[_T]:
    """Run ``func(*args)`` in the pool; the returned future belongs to the running loop."""
    return asyncio.wrap_future(submit(func, *args))


def _reset_after_fork() -> None:
    global _lock, _pool
    _lock = threading.Lock()
    _pool = None  # the parent's threads do not exist in the child


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
