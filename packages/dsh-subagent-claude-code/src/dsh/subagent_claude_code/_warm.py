"""Warm Claude Code processes (``prewarm = N``): the CLI started and its ``initialize`` done.

A warm process is a ``ClaudeCodeRun`` whose transport has spawned the CLI and sent it the
``initialize`` control request the SDK's ``query()`` sends (``WARM_INITIALIZE``). A start that
takes one runs the SDK query on it: the SDK's own ``initialize`` is answered by the CLI at once,
then the task is written. The CLI fixes its cwd (and ``PWD``), its argv and its env at spawn,
so these are the key: a request from another cwd, or with a forwarded value that has changed
since, is a miss and starts cold. The per-process run dir (private ``TMPDIR``, the Bash-tool env
script) is not part of the key: each warm process gets its own, removed with it. See
docs/dsh-subagent-claude-code.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Sequence

from dsh.subagent.kit import WarmPool
from dsh.subagent_claude_code._command import child_env_overlay
from dsh.subagent_claude_code._run import ClaudeCodeRun
from dsh.subagent_claude_code.config import ClaudeCodeProviderConfig

__all__ = ["WarmClaudeCode"]

_log = logging.getLogger("dsh.subagent_claude_code")

_Key = tuple[str, tuple[str, ...], tuple[tuple[str, str | None], ...]]
NewRun = Callable[[str, list[str], dict[str, str | None]], Awaitable[ClaudeCodeRun]]
Rollback = Callable[[ClaudeCodeRun, BaseException], Awaitable[None]]


class WarmClaudeCode:
    """The provider's pool of warm Claude Code CLIs (created on first use).

    ``new_run`` and ``rollback`` are the provider's own steps (an unspawned run with its run
    dir; the start-up rollback that raises the safe failure).
    """

    def __init__(
        self, config: ClaudeCodeProviderConfig, *, new_run: NewRun, rollback: Rollback
    ) -> None:
        self._config = config
        self._new_run = new_run
        self._rollback = rollback
        self._pool: WarmPool[ClaudeCodeRun] | None = None

    @property
    def pool(self) -> WarmPool[ClaudeCodeRun]:
        if self._pool is None:
            self._pool = WarmPool(
                self._config.prewarm,
                make=self._make,
                alive=ClaudeCodeRun.warm_usable,
                close=ClaudeCodeRun.discard,
                kill=_kill,
            )
        return self._pool

    def key(self, cwd: str, argv: Sequence[str]) -> _Key:
        """What this request fixes per process: cwd, argv and the env overlay (no run dir)."""
        env = child_env_overlay(self._config, cwd=cwd, tmp_dir=None, env_file=None)
        return (cwd, tuple(argv), tuple(sorted(env.items())))

    async def start(self, key: _Key, texts: Sequence[str]) -> ClaudeCodeRun | None:
        """A published run on a warm CLI, or None: the caller starts cold."""
        run = await self.pool.take(key)
        if run is None:
            return None
        if run.process is not None:
            run.process.set_busy(True)  # it counts as a run in flight again (nice = "auto")
        try:
            run.begin(texts)
            await run.wait_ready()
        except asyncio.CancelledError as error:
            await self._rollback(run, error)
            raise  # unreachable: _rollback always raises
        except Exception:
            # The warm CLI failed before the task was delivered (it exited since the take):
            # not the request's failure. It is torn down and the start goes cold.
            _log.debug(
                "a warm Claude Code CLI failed before its task; starting cold", exc_info=True
            )
            await run.discard()  # raises the safe teardown failure if exit was not proven
            return None
        _log.debug("Claude Code run %s published on a warm CLI", run.id)
        return run

    async def aclose(self) -> None:
        if self._pool is not None:
            await self._pool.aclose()

    async def _make(self, key: Hashable) -> ClaudeCodeRun:
        assert isinstance(key, tuple)
        cwd, argv, env = key
        run = await self._new_run(cwd, list(argv), dict(env))
        try:
            await run.spawn()
            await run.preinitialize()
        except BaseException:
            await _discard_quietly(run)
            raise
        if run.process is not None:
            run.process.set_busy(False)  # waiting for a delegation: no contention ("auto")
        return run


def _kill(run: ClaudeCodeRun) -> None:
    process = run.process
    if process is not None:
        process.kill_now()


async def _discard_quietly(run: ClaudeCodeRun) -> None:
    try:
        await run.discard()
    except Exception:
        _log.debug("closing a warm Claude Code CLI that failed to start failed", exc_info=True)
