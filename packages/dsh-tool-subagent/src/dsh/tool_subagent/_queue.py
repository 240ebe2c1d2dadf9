"""The fair queue: at most ``max_concurrent`` runs of one provider in flight in this process,
across all owners, and the waiting owners served in turn.

One :class:`RunQueue` per provider name per process (:func:`queue_for`), shared by every harness
and tool of the process; each entry carries its own limit (the profile's ``max_concurrent`` for
that provider), and is admitted when fewer runs than that are in flight. Waiters are kept per
owner (the caller's session id); a freed slot goes to the first waiter of the owner whose turn it
is, and that owner then moves to the end of the turn order, so an owner with 50 waiting runs and
an owner with 1 alternate. Admission is strict in that order: the head waits even when a later
entry's larger limit would fit. A cancelled waiter (a ``job_kill``, a cancelled call, the
caller's ``timeout_s``) leaves at once and starts nothing. All of it runs on the event loop: no
task, no lock, one future per waiting run. docs/liveness.md states the contract.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from dsh.jobs import job_admitted, job_queued

__all__ = ["Admission", "RunQueue", "queue_for"]


@dataclass(eq=False)
class _Waiter:
    owner: str
    limit: int
    future: asyncio.Future[None]
    order: int = 0


@dataclass(frozen=True, slots=True)
class Admission:
    """One run's slot: how it got it, and the release (call :meth:`RunQueue.leave` once).

    ``place`` is its place in the queue when it entered (0: admitted at once), ``order`` the
    number of its admission among the provider's runs in this process (1, 2, ...) and
    ``waited_s`` the seconds it waited.
    """

    provider: str
    limit: int
    place: int
    order: int
    waited_s: float

    def as_json(self) -> dict[str, Any]:
        """The host-only facts (``meta["queue"]``)."""
        return {
            "max_concurrent": self.limit,
            "place": self.place,
            "order": self.order,
            "waited_s": self.waited_s,
        }


@dataclass(eq=False)
class RunQueue:
    """The runs of one provider in flight in this process and the owners waiting for a slot."""

    provider: str
    in_flight: int = 0
    admitted: int = 0
    #: Owner → its waiters in arrival order; the dict's order is the turn order.
    _waiting: dict[str, deque[_Waiter]] = field(default_factory=dict)

    @property
    def waiting(self) -> int:
        return sum(len(waiters) for waiters in self._waiting.values())

    def place(self, waiter: _Waiter) -> int | None:
        """``waiter``'s place in the serving order (1: next), or ``None`` once it has left."""
        place, depth = 0, 0
        queues = list(self._waiting.values())
        while queues:
            for waiters in queues:
                place += 1
                if waiters[depth] is waiter:
                    return place
            depth += 1
            queues = [waiters for waiters in queues if len(waiters) > depth]
        return None

    async def enter(self, owner: str, limit: int, deadline: float | None) -> Admission | None:
        """A slot for one run of ``owner`` under ``limit``; ``None`` when the loop-time
        ``deadline`` passed first. A cancellation while waiting leaves the queue and propagates."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        if not self._waiting and self.in_flight < limit:
            return self._admit(limit, 0, began)
        waiter = _Waiter(owner, limit, loop.create_future())
        self._waiting.setdefault(owner, deque()).append(waiter)
        entered_at = self.place(waiter) or 0
        job_queued(lambda: self.place(waiter))
        bound = asyncio.timeout_at(deadline)
        try:
            async with bound:
                await waiter.future
        except BaseException as exc:
            if waiter.future.done() and not waiter.future.cancelled():
                self._release()  # admitted as the cancellation or the deadline landed
            else:
                self._drop(waiter)
            job_admitted()
            if isinstance(exc, TimeoutError) and bound.expired():
                return None
            raise
        job_admitted()
        waited = round(loop.time() - began, 4)
        return Admission(self.provider, limit, entered_at, waiter.order, waited)

    def _admit(self, limit: int, place: int, began: float) -> Admission:
        self.in_flight += 1
        self.admitted += 1
        waited = round(asyncio.get_running_loop().time() - began, 4)
        return Admission(self.provider, limit, place, self.admitted, waited)

    def leave(self) -> None:
        """A run that was admitted ended: its slot goes to the next waiter in turn."""
        self._release()

    def _release(self) -> None:
        self.in_flight -= 1
        self._serve()

    def _drop(self, waiter: _Waiter) -> None:
        waiters = self._waiting.get(waiter.owner)
        if waiters is None or waiter not in waiters:
            return
        waiters.remove(waiter)
        if not waiters:
            del self._waiting[waiter.owner]
        self._serve()  # a head that could not fit may have been blocking the rest

    def _serve(self) -> None:
        while self._waiting:
            owner = next(iter(self._waiting))
            waiters = self._waiting[owner]
            head = waiters[0]
            if self.in_flight >= head.limit:
                return
            waiters.popleft()
            del self._waiting[owner]
            if waiters:  # the owner's turn is over: it goes to the end of the order
                self._waiting[owner] = waiters
            self.in_flight += 1
            self.admitted += 1
            head.order = self.admitted
            head.future.set_result(None)


_QUEUES: dict[str, RunQueue] = {}


def queue_for(provider: str) -> RunQueue:
    """The process's queue of ``provider`` (made at first use)."""
    queue = _QUEUES.get(provider)
    if queue is None:
        queue = _QUEUES[provider] = RunQueue(provider)
    return queue
