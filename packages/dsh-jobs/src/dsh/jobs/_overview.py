"""The bounded overview of an owner's jobs that ``job_list`` shows (a :class:`JobOverview`)."""

from __future__ import annotations

from dsh.jobs._job import Job, JobOverview, snapshot_of
from dsh.jobs._pending_flags import PendingFlags
from dsh.jobs._store import JobStore, RecordFilter

__all__ = ["overview_of"]


def overview_of(
    mine: list[Job],
    store: JobStore,
    flags: PendingFlags,
    owner: str,
    origin: str,
    finished_limit: int,
) -> JobOverview:
    """The live jobs (oldest first) and the ``finished_limit`` newest finished ones of ``owner``
    started at ``origin``, plus how many finished ones that leaves out; ``mine`` are the ones
    held in memory, read from there."""
    here = tuple(job.id for job in mine)
    live_where = RecordFilter(owner=owner, origin=origin, live=True, exclude=here)
    live = {r.id: r for r in flags.seen(lambda: store.newest(live_where, 1 << 16))}
    finished_where = RecordFilter(owner=owner, origin=origin, live=False, exclude=here)
    finished = {
        r.id: r
        for r in flags.seen(lambda: store.newest(finished_where, finished_limit, by="finished"))
    }
    total = store.count(finished_where)
    for record in list(live.values()):
        if record.terminal:  # its holder was gone: settled as this read found it
            del live[record.id]
            finished[record.id] = record
            total += 1
    for job in mine:
        record = job.record()
        if record.terminal:
            finished[job.id] = record
            total += 1
        else:
            live[job.id] = record
    newest = sorted(finished.values(), key=lambda r: r.finished_at or 0.0, reverse=True)
    shown = newest[:finished_limit]
    return JobOverview(
        live=[snapshot_of(r) for r in sorted(live.values(), key=lambda r: r.started_at)],
        finished=[snapshot_of(r) for r in shown],
        more=max(0, total - len(shown)),
    )
