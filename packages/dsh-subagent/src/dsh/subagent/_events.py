"""Lifecycle events of the service and their delivery to listeners."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from dsh.subagent._types import StopReason

__all__ = [
    "Listener",
    "ProviderAdded",
    "ProviderRemoved",
    "SubagentEnded",
    "SubagentEvent",
    "SubagentStarted",
]

_log = logging.getLogger("dsh.subagent")


@dataclass(frozen=True, slots=True)
class ProviderAdded:
    name: str


@dataclass(frozen=True, slots=True)
class ProviderRemoved:
    name: str


@dataclass(frozen=True, slots=True)
class SubagentStarted:
    """A run was published. ``run_id`` is the service's fresh id; ``id`` is the run's own id."""

    run_id: str
    provider: str
    id: str


@dataclass(frozen=True, slots=True)
class SubagentEnded:
    """A published run's result settled. ``last_assistant_message`` is ``None`` for empty output."""

    run_id: str
    provider: str
    id: str
    stop_reason: StopReason
    last_assistant_message: str | None


SubagentEvent = ProviderAdded | ProviderRemoved | SubagentStarted | SubagentEnded
Listener = Callable[[SubagentEvent], None] | Callable[[SubagentEvent], Awaitable[None]]


def _event_name(event: SubagentEvent) -> str:
    return type(event).__name__


def log_listener_failure(event: SubagentEvent, error: BaseException) -> None:
    """Log a raising listener: a safe WARNING line, the raw cause at DEBUG."""
    _log.warning("a subagent event listener raised on %s; ignored", _event_name(event))
    _log.debug("listener failure on %s", _event_name(event), exc_info=error)


class Listeners:
    """The subscribed listeners, in subscription order, and the tasks they were given.

    Async listeners of events emitted from synchronous code (``register`` and ``unregister``) run
    as tasks owned here; :meth:`aclose` cancels and awaits them.
    """

    def __init__(self) -> None:
        self._listeners: list[tuple[object, Listener]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        token = object()
        self._listeners.append((token, listener))

        def unsubscribe() -> None:
            self._listeners[:] = [entry for entry in self._listeners if entry[0] is not token]

        return unsubscribe

    def snapshot(self) -> list[Listener]:
        return [listener for _, listener in self._listeners]

    async def emit(self, event: SubagentEvent) -> None:
        """Deliver ``event`` to every listener in order; a raising listener is logged."""
        for listener in self.snapshot():
            try:
                outcome = listener(event)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception as error:
                log_listener_failure(event, error)

    def emit_sync(
        self, event: SubagentEvent, *, stop_on_error: bool = False, limit: int | None = None
    ) -> tuple[int, Exception] | None:
        """Deliver ``event`` from synchronous code (to the first ``limit`` listeners, if given).

        Plain listeners are called in order. An async listener's coroutine runs as an owned task
        (with no running loop it is closed unrun and a WARNING is logged). With ``stop_on_error``
        the first raising plain listener stops delivery and ``(index, error)`` is returned;
        otherwise a raising listener is logged and delivery goes on.
        """
        listeners = self.snapshot()
        if limit is not None:
            listeners = listeners[:limit]
        for index, listener in enumerate(listeners):
            try:
                outcome = listener(event)
            except Exception as error:
                if stop_on_error:
                    return index, error
                log_listener_failure(event, error)
                continue
            if inspect.isawaitable(outcome):
                self._spawn(event, outcome)
        return None

    def _spawn(self, event: SubagentEvent, outcome: Awaitable[None]) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            if inspect.iscoroutine(outcome):
                outcome.close()
            _log.warning(
                "an async subagent event listener was skipped for %s: no running event loop",
                _event_name(event),
            )
            return

        async def deliver() -> None:
            try:
                await outcome
            except Exception as error:
                log_listener_failure(event, error)

        task = asyncio.ensure_future(deliver())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        """Cancel and await the listener tasks this object owns."""
        while self._tasks:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._tasks.difference_update(tasks)
