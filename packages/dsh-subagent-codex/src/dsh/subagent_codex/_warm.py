"""Warm Codex processes (``prewarm = N``): ``codex app-server`` spawned, ``initialize`` done.

A warm process is a ``CodexRun`` that stopped after ``initialize`` + ``initialized``, the
account check (and the login of a forwarded key) and ``thread/start`` (an ephemeral thread;
every field of it comes from the instance's config and the request's cwd, which is in the key).
A start that takes one sends only its task (``turn/start``). What Codex fixes per process is the
key: the process cwd (Codex resolves what a thread leaves open against it, so a warm process runs
in the request's cwd exactly as a cold one would), the argv, and the env overlay computed for the
request (forwarded values included: a changed credential is a miss, never a stale process).
Codex caches its credentials for the process's life, so a warm process whose home's login file
changed since its spawn is retired (``CodexRun.warm_usable``). See docs/dsh-subagent-codex.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any

from dsh.subagent.kit import WarmPool
from dsh.subagent_codex._run import CodexRun

__all__ = ["CodexSteps", "WarmCodex"]

_Key = tuple[str, tuple[str, ...], tuple[tuple[str, str | None], ...]]
ArgvEnv = Callable[[], tuple[list[str], dict[str, str | None]]]


@dataclass(frozen=True)
class CodexSteps:
    """The provider's own start-up steps, which a warm start runs in another order."""

    argv_env: ArgvEnv
    spawn: Callable[[str, ArgvEnv], Awaitable[CodexRun]]
    thread_params: Callable[[str], dict[str, Any]]
    publish: Callable[[CodexRun, list[str]], Awaitable[CodexRun]]


class WarmCodex:
    """The provider's pool of warm ``codex app-server`` processes (created on first use)."""

    def __init__(self, size: int, steps: CodexSteps) -> None:
        self._size = size
        self._steps = steps
        self._pool: WarmPool[CodexRun] | None = None

    @property
    def pool(self) -> WarmPool[CodexRun]:
        if self._pool is None:
            self._pool = WarmPool(
                self._size,
                make=self._make,
                alive=CodexRun.warm_usable,
                close=_close,
                kill=_kill,
            )
        return self._pool

    def key(self, cwd: str) -> _Key | None:
        """What this request fixes per process; None when it cannot be computed (start cold)."""
        try:
            argv, env = self._steps.argv_env()
        except Exception:
            return None  # the cold path reports the same failure, safely
        return (cwd, tuple(argv), tuple(sorted(env.items())))

    async def start(self, key: _Key, texts: list[str]) -> CodexRun | None:
        """A published run on a warm process, or None: the caller starts cold."""
        run = await self.pool.take(key)
        if run is None:
            return None
        run.process.set_busy(True)  # it counts as a run in flight again (nice = "auto")
        # No await since the pool checked it alive: the task goes out on the thread it has.
        return await self._steps.publish(run, texts)

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()

    async def _make(self, key: Hashable) -> CodexRun:
        cwd, argv, env = _unpack(key)
        run = await self._steps.spawn(cwd, lambda: (list(argv), dict(env)))
        try:
            await run.start_thread(self._steps.thread_params(cwd))
        except BaseException:
            with contextlib.suppress(Exception):
                await run.rollback()
            raise
        run.process.set_busy(False)  # waiting for a delegation: no contention (nice = "auto")
        return run


def _unpack(key: Hashable) -> _Key:
    assert isinstance(key, tuple)
    cwd, argv, env = key
    return (cwd, argv, env)


def _kill(run: CodexRun) -> None:
    run.process.kill_now()


async def _close(run: CodexRun) -> None:
    await run.rollback()
