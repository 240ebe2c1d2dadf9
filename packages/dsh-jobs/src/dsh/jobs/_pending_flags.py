"""What a registry wrote to its store and the store has not made durable yet.

A registry queues flag changes (``reported``, ``noticed``, ``kill_requested``) of stored jobs to
the store's writer thread; its own reads must see them at once, before they land.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace

from dsh.jobs._store import JobRecord, JobStore

__all__ = ["PendingFlags"]


class PendingFlags:
    """The queued flag changes of one registry, with how many writes of each job are in flight."""

    def __init__(self, store: Callable[[], JobStore]) -> None:
        self._store = store
        self._pending: dict[str, tuple[dict[str, bool], int]] = {}
        self._lock = threading.Lock()

    def flag(self, job_id: str, changes: dict[str, bool]) -> None:
        """Queue flag changes of a stored job; the registry's reads see them at once."""
        with self._lock:
            flags, writes = self._pending.get(job_id, ({}, 0))
            self._pending[job_id] = ({**flags, **changes}, writes + 1)
        self._store().update(job_id, changes, functools.partial(self._landed, job_id))

    def _landed(self, job_id: str) -> None:  # on the store's writer thread
        with self._lock:
            flags, writes = self._pending[job_id]
            if writes <= 1:
                del self._pending[job_id]
            else:
                self._pending[job_id] = (flags, writes - 1)

    def seen(self, read: Callable[[], Iterable[JobRecord]]) -> list[JobRecord]:
        """Stored records, read by ``read``, as the registry last changed them, whose holder is
        checked.

        The queued flags are taken before the read as well as after it: a write that lands
        between the two has left the queue, and the read may predate it (a notice taken twice).
        Flags only ever turn on, so both views are merged.
        """
        with self._lock:
            before = {job_id: flags for job_id, (flags, _) in self._pending.items()}
        records = self._store().correct(read())
        out = []
        for record in records:
            with self._lock:
                after = self._pending.get(record.id)
            flags = {**before.get(record.id, {}), **(after[0] if after is not None else {})}
            if flags:
                record = replace(
                    record,
                    reported=flags.get("reported", record.reported),
                    noticed=flags.get("noticed", record.noticed),
                    kill_requested=flags.get("kill_requested", record.kill_requested),
                )
            out.append(record)
        return out
