"""``WarmPool``: product processes spawned and initialised ahead of the delegations that use them.

A provider with ``prewarm = N`` keeps up to N warm processes for one *key*: everything the
product fixes per process that a request can change (the cwd, the env forwarded for it). Each
warm process serves exactly one run. The pool knows nothing about processes: the provider hands
it four callables (make, alive, close, kill) and gets back opaque warm objects.

Rules (docs/dsh-subagent.md, "Warm starts"):
- ``take(key)`` returns an idle warm object for ``key``, else waits for one that is being
  initialised for ``key`` and that no other ``take`` is already waiting for, else returns None
  (the caller starts cold). A take never spawns: once the caller's run is published (on a warm
  object or a cold one) it calls ``replenish_after(run.wait_closed(), key)``, which starts the
  missing warm spawns as background tasks once that run is closed (its tree gone). So a
  replacement never competes for CPU with the run it replaces, its close included, and two
  first-time starts of a product never race in a fresh home (Codex can fail then).
- A new key *retargets* the pool: its idle objects are closed in the background, and the next
  ``replenish`` warms N for the new key. So the idle cost is at most N processes, whatever the
  callers do.
- An idle object that is no longer ``alive`` is never handed out; it is closed and the take
  goes on (a miss is a cold start, never an error). A warm spawn that fails is logged at DEBUG
  and not retried until the next take, so a broken product cannot spawn in a loop.
- ``aclose()`` stops warming for good: in-flight spawns are cancelled (their makers tear their
  partial trees down), idle objects are closed, and every later take returns None.
- The pool belongs to one event loop; a take on another loop kills what the old loop left
  (synchronously, through ``kill``) and starts over.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["WARM_START_TIMEOUT_S", "WarmPool"]

_log = logging.getLogger("dsh.subagent")

W = TypeVar("W")

WARM_START_TIMEOUT_S = 60.0
"""How long one warm spawn may take to initialise before it is given up (the SDK's own bound for
Claude Code's ``initialize``). A cold start has no such bound; a warm one has no caller to cancel
it, so without it a hung product would hold a slot forever."""


@dataclass
class _Warming:
    key: Hashable
    task: asyncio.Task[None] | None = None
    claimed: bool = False


@dataclass
class _State(Generic[W]):
    loop: asyncio.AbstractEventLoop
    key: Hashable | None = None
    idle: list[tuple[Hashable, W]] = field(default_factory=list)
    warming: list[_Warming] = field(default_factory=list)
    closing: set[asyncio.Task[None]] = field(default_factory=set)
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class WarmPool(Generic[W]):
    """Up to ``size`` warm objects for the latest key; see the module docstring."""

    def __init__(
        self,
        size: int,
        *,
        make: Callable[[Hashable], Awaitable[W]],
        alive: Callable[[W], bool],
        close: Callable[[W], Awaitable[None]],
        kill: Callable[[W], None],
        timeout_s: float = WARM_START_TIMEOUT_S,
    ) -> None:
        self.size = size
        self._make = make
        self._alive = alive
        self._close = close
        self._kill = kill
        self._timeout_s = timeout_s
        self._state: _State[W] | None = None
        self._closed = False
        self.taken = 0
        """Takes that got a warm object (for tests and the benchmark)."""
        self.missed = 0
        """Takes that returned None: the caller started cold."""
        self.dead_idle = 0
        """Idle objects found dead at a take, and not used."""

    @property
    def closed(self) -> bool:
        return self._closed

    def idle(self) -> list[W]:
        """The idle warm objects now, oldest first (for tests and the benchmark)."""
        return [] if self._state is None else [warm for _, warm in self._state.idle]

    async def take(self, key: Hashable) -> W | None:
        """A warm object for ``key`` (the caller owns it from now on), or None: start cold."""
        warm = await self._take(key)
        if warm is None:
            self.missed += 1
        else:
            self.taken += 1
        return warm

    async def _take(self, key: Hashable) -> W | None:
        if self.size <= 0 or self._closed:
            return None
        state = self._bind()
        if state.key != key:
            self._retarget(state, key)
            return None
        while True:
            while state.idle:
                _, warm = state.idle.pop(0)
                if self._alive(warm):
                    return warm
                _log.debug("a warm product process died while idle; not used")
                self.dead_idle += 1
                self._close_later(state, warm)
            waiting = next((w for w in state.warming if w.key == key and not w.claimed), None)
            if waiting is None or self._closed or state.key != key:
                return None
            waiting.claimed = True
            try:
                state.changed.clear()
                await state.changed.wait()
            finally:
                waiting.claimed = False
            if self._closed or state.key != key:
                return None

    def replenish_after(self, done: Awaitable[object], key: Hashable) -> None:
        """``replenish(key)`` once ``done`` (a run's close) is ready, in the background.

        The replacement of the process a run took then never takes CPU from that run: on a
        loaded machine a Claude Code CLI's start-up (0.6 s of CPU) slowed the run it replaced
        by half (docs/performance.md, "Warm starts"). Started at the run's result instead, it
        still overlapped the run's close (a warm Codex run's last 25 ms, measured 2026-12-07).
        """
        state = self._state
        if self.size <= 0 or self._closed or state is None or state.loop is not _running_loop():
            if inspect.iscoroutine(done):
                done.close()  # never awaited: say so to nobody
            return

        async def wait_then_replenish() -> None:
            with contextlib.suppress(Exception):
                await done
            self.replenish(key)

        def close_if_never_awaited(_task: object) -> None:
            # A task cancelled before its first step (the pool closed at once) never awaited
            # ``done``: close it, or the interpreter warns that it was never awaited.
            if inspect.iscoroutine(done) and inspect.getcoroutinestate(done) == "CORO_CREATED":
                done.close()

        task = state.loop.create_task(wait_then_replenish())
        state.closing.add(task)
        task.add_done_callback(state.closing.discard)
        task.add_done_callback(close_if_never_awaited)

    def replenish(self, key: Hashable) -> None:
        """Warm up to ``size`` objects for ``key`` in the background (after a run's start).

        Nothing happens for a key that is no longer the latest, on a closed pool, or outside the
        pool's loop.
        """
        if self.size <= 0 or self._closed:
            return
        state = self._state
        if state is None or state.key != key or state.loop is not _running_loop():
            return
        self._refill(state)

    async def aclose(self) -> None:
        """Stop warming; close every idle object and cancel every in-flight warm spawn."""
        self._closed = True
        state, self._state = self._state, None
        if state is None:
            return
        state.changed.set()
        if state.loop is not _running_loop():
            self._abandon(state)
            return
        tasks = [w.task for w in state.warming if w.task is not None]
        for task in (*tasks, *state.closing):
            task.cancel()
        idle, state.idle = state.idle, []
        closes = [self._close_quietly(warm) for _, warm in idle]
        await asyncio.gather(*tasks, *closes, *state.closing, return_exceptions=True)

    # ---- internals ------------------------------------------------------------------------

    def _bind(self) -> _State[W]:
        loop = asyncio.get_running_loop()
        state = self._state
        if state is not None and state.loop is loop:
            return state
        if state is not None:
            self._abandon(state)
        self._state = _State(loop)
        return self._state

    def _abandon(self, state: _State[W]) -> None:
        """The state of another (or no) loop: nothing there can be awaited, so kill now."""
        for _, warm in state.idle:
            with contextlib.suppress(Exception):
                self._kill(warm)
        state.idle = []
        state.warming = []

    def _retarget(self, state: _State[W], key: Hashable) -> None:
        state.key = key
        stale, state.idle = state.idle, []
        for _, warm in stale:
            self._close_later(state, warm)
        state.changed.set()  # waiters for the old key go cold

    def _refill(self, state: _State[W]) -> None:
        if self._closed:
            return
        key = state.key
        have = len(state.idle) + sum(1 for w in state.warming if w.key == key)
        for _ in range(self.size - have):
            warming = _Warming(key)
            # A fresh context: a warm process belongs to no run yet, so nothing of the run
            # that triggered the refill (its trace context, say) may reach its spawn.
            warming.task = state.loop.create_task(
                self._warm(state, warming), context=contextvars.Context()
            )
            state.warming.append(warming)

    async def _warm(self, state: _State[W], warming: _Warming) -> None:
        try:
            async with asyncio.timeout(self._timeout_s):
                warm = await self._make(warming.key)
        except asyncio.CancelledError:
            raise
        except Exception:
            _log.debug("a warm product process could not be started", exc_info=True)
            return
        finally:
            with contextlib.suppress(ValueError):
                state.warming.remove(warming)
            state.changed.set()
        if self._closed or state.key != warming.key or self._state is not state:
            await self._close_quietly(warm)
            return
        state.idle.append((warming.key, warm))
        state.changed.set()

    def _close_later(self, state: _State[W], warm: W) -> None:
        task = state.loop.create_task(self._close_quietly(warm))
        state.closing.add(task)
        task.add_done_callback(state.closing.discard)

    async def _close_quietly(self, warm: W) -> None:
        try:
            await self._close(warm)
        except Exception:
            _log.debug("closing a warm product process failed", exc_info=True)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
