"""``ScriptedModelServer``: the scripting half both loopback model servers share.

A product's fake model server (Codex's Responses API, Claude Code's Messages API) speaks its own
wire format, but scripts the same way: an ordered queue of replies, each optionally kept for the
requests whose task text contains a ``match`` string; an optional ``route`` callback consulted
first; a ``default`` reply once the queue has nothing for a request, else an HTTP 500 saying
``NO_REPLY_MESSAGE`` in the product's error shape. Every request is recorded (bounded) as a
``ModelRequest``; ``requests`` lists the model calls, ``all_requests`` every request.

The servers run on an event loop (Codex's) or in a thread (Claude Code's), so the state here is
guarded by one lock and ``wait_for_requests`` wakes waiters on any loop, from any thread.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = ["MAX_RECORDED_REQUESTS", "NO_REPLY_MESSAGE", "ModelRequest", "ScriptedModelServer"]

MAX_RECORDED_REQUESTS = 1000
"""How many requests each view keeps; the oldest are dropped first (a long benchmark's newest
requests stay visible)."""

NO_REPLY_MESSAGE = "no reply scripted"
"""The error message of the HTTP 500 a server sends when its script has nothing for a request."""


@dataclass(frozen=True)
class ModelRequest:
    """One request as a fake model server saw it. ``headers`` has lower-cased names.

    ``path`` is without the query string (``query`` holds it); ``body`` is the parsed JSON body
    (``None`` when there is none or it is not JSON); ``raw_body`` is the bytes as received.
    """

    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    body: Any
    raw_body: bytes

    @property
    def task(self) -> str | None:
        """The run's task text as this product's request carries it (each product defines it)."""
        return None


ReplyT = TypeVar("ReplyT")
RequestT = TypeVar("RequestT", bound=ModelRequest)


class ScriptedModelServer(abc.ABC, Generic[ReplyT, RequestT]):
    """The queue, routing, dry-script default and recorded requests of a fake model server.

    - ``queue(*replies, match=None)``: append replies in order. A reply queued with ``match`` is
      served only to a request whose ``task`` contains that text (so concurrent runs can be
      scripted apart); each request takes the first queued reply it may have, in queue order.
    - ``route`` (constructor): ``route(request) -> reply | None`` is asked first for every model
      request and is not used up; ``None`` falls back to the queue.
    - ``default`` (constructor): the reply once neither has one; with no default the server
      answers HTTP 500 with ``NO_REPLY_MESSAGE``.
    - ``requests`` / ``all_requests`` / ``wait_for_requests`` / ``pending``: what arrived and
      what is left.
    - ``release_stalls()``: every stalled request ends now (its connection is closed).
    """

    def __init__(
        self,
        *,
        default: ReplyT | None = None,
        route: Callable[[RequestT], ReplyT | None] | None = None,
    ) -> None:
        self.default = default
        self._route = route
        self._script_lock = threading.Lock()
        self._script: deque[tuple[ReplyT, str | None]] = deque()
        self._model_calls: deque[RequestT] = deque(maxlen=MAX_RECORDED_REQUESTS)
        self._everything: deque[RequestT] = deque(maxlen=MAX_RECORDED_REQUESTS)
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    # -- scripting --------------------------------------------------------------------------
    def queue(self, *replies: ReplyT, match: str | None = None) -> None:
        """Append ``replies`` in order; with ``match``, each serves only a matching task."""
        with self._script_lock:
            self._script.extend((reply, match) for reply in replies)

    @property
    def pending(self) -> int:
        """How many queued replies are still unused."""
        with self._script_lock:
            return len(self._script)

    # The reply kinds every product's server offers, in its own wire form. A server may add
    # keyword-only extras (Codex: a message ``phase``, a ``call_id``) and kinds of its own.
    @abc.abstractmethod
    def queue_text(self, text: str, *, match: str | None = None) -> None:
        """Queue an answer of ``text``."""

    @abc.abstractmethod
    def queue_tool_call(
        self, name: str, arguments: Mapping[str, Any], *, match: str | None = None
    ) -> None:
        """Queue a call of the product's tool ``name`` with ``arguments``."""

    @abc.abstractmethod
    def queue_http_error(
        self, status: int, message: str = "fake error", *, match: str | None = None
    ) -> None:
        """Queue an HTTP error ``status`` whose product-shaped error body carries ``message``."""

    @abc.abstractmethod
    def queue_drop(self, partial_text: str = "partial", *, match: str | None = None) -> None:
        """Queue the start of an answer, then a connection closed mid-stream."""

    @abc.abstractmethod
    def queue_stall(self, *, seconds: float | None = None, match: str | None = None) -> None:
        """Queue a stall: the request is accepted and never answered, for ``seconds`` if set,
        else until ``release_stalls()`` or the server stops (a server may bound it)."""

    @abc.abstractmethod
    def release_stalls(self) -> None:
        """End every stalled request now (its connection is closed); later stalls stall again."""

    # -- observation ------------------------------------------------------------------------
    @property
    def requests(self) -> list[RequestT]:
        """The model calls (the requests the script answers), in arrival order."""
        with self._script_lock:
            return list(self._model_calls)

    @property
    def all_requests(self) -> list[RequestT]:
        """Every request the server received (model calls and any other path), in order."""
        with self._script_lock:
            return list(self._everything)

    async def wait_for_requests(self, count: int, timeout: float = 30.0) -> list[RequestT]:  # noqa: ASYNC109
        """Wait (event-driven, bounded) until ``count`` model calls arrived; return them all.

        Raises ``TimeoutError`` after ``timeout`` seconds.
        """
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._script_lock:
            self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                while True:
                    waiter[1].clear()
                    seen = self.requests
                    if len(seen) >= count:
                        return seen
                    await waiter[1].wait()
        finally:
            with self._script_lock:
                self._waiters.remove(waiter)

    # -- for the server ---------------------------------------------------------------------
    def _record(self, request: RequestT, *, model_call: bool) -> None:
        with self._script_lock:
            self._everything.append(request)
            if model_call:
                self._model_calls.append(request)
            waiters = list(self._waiters)
        for loop, event in waiters:
            # A waiter's loop may close between the copy and this call; it waits no more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)

    def _answer(self, request: RequestT) -> ReplyT | None:
        """Record the model call ``request`` and pick its reply (``None``: the script is dry)."""
        self._record(request, model_call=True)
        if self._route is not None:
            routed = self._route(request)
            if routed is not None:
                return routed
        task = request.task or ""
        with self._script_lock:
            for index, (reply, match) in enumerate(self._script):
                if match is None or match in task:
                    del self._script[index]
                    return reply
        return self.default
