"""Idle remote workers kept for the next job, handed first to the jobs already waiting.

A remote executor starts a worker (a Ray actor, a process on some node) per job only when no idle
one is left: starting one costs a process and its imports. A worker holds its node's capacity
share while it lives, so a worker that finishes a job is handed at once to a job that is waiting
for capacity (otherwise that job would wait behind a share nobody uses), else kept idle for at
most ``idle_s`` and then stopped. Nothing here knows Ray: ``stop`` ends a worker.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Worker", "WorkerPool"]

HandleT = TypeVar("HandleT")


@dataclass(frozen=True, slots=True)
class Worker(Generic[HandleT]):
    """A started worker and where it runs (the executor's name for its node)."""

    handle: HandleT
    where: str


class WorkerPool(Generic[HandleT]):
    """Idle workers and the jobs waiting for one. Single event loop; not thread-safe."""

    def __init__(self, stop: Callable[[HandleT], None], idle_s: float) -> None:
        self._stop = stop
        self._idle_s = idle_s
        self._idle: list[tuple[Worker[HandleT], asyncio.TimerHandle]] = []
        self._waiting: deque[asyncio.Future[Worker[HandleT]]] = deque()
        self._closed = False

    def take(self) -> Worker[HandleT] | None:
        """The most recently idle worker, or ``None``."""
        if not self._idle:
            return None
        worker, timer = self._idle.pop()
        timer.cancel()
        return worker

    def wait(self) -> asyncio.Future[Worker[HandleT]]:
        """A future that a released worker completes; cancel it when no longer needed."""
        future: asyncio.Future[Worker[HandleT]] = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        return future

    def release(self, worker: Worker[HandleT]) -> None:
        """A worker whose job ended cleanly: to the first waiting job, else idle for a while."""
        if self._closed:
            self._stop(worker.handle)
            return
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_result(worker)
                return
        timer = asyncio.get_running_loop().call_later(self._idle_s, self._expire, worker)
        self._idle.append((worker, timer))

    def discard(self, handle: HandleT) -> None:
        """Stop a worker that must not run another job (killed job, lost, never started)."""
        self._stop(handle)

    def _expire(self, worker: Worker[HandleT]) -> None:
        for index, (idle, _timer) in enumerate(self._idle):
            if idle is worker:
                del self._idle[index]
                self._stop(worker.handle)
                return

    def close(self) -> None:
        """Stop every idle worker; later releases stop theirs. Idempotent."""
        self._closed = True
        while self._idle:
            worker, timer = self._idle.pop()
            timer.cancel()
            self._stop(worker.handle)
        for future in self._waiting:
            future.cancel()
        self._waiting.clear()

    @property
    def idle(self) -> int:
        return len(self._idle)
