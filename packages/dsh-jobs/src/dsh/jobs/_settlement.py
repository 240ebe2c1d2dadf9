"""How a job's ended task becomes its settlement: the status, detail and output it records."""

from __future__ import annotations

import asyncio
import logging

from dsh.jobs._job import Job, joined, safe_exception_detail
from dsh.jobs._types import JobOutcome, JobStatus

__all__ = ["settlement_of"]

logger = logging.getLogger("dsh.jobs")


def settlement_of(job: Job, task: asyncio.Task[JobOutcome]) -> tuple[JobStatus, str | None, str]:
    """``(status, detail, output)`` for ``job`` whose ``task`` has ended; keeps the work's meta.

    A kill requested meanwhile wins over what the work returned or raised, and its reason comes
    first in the detail.
    """
    status: JobStatus
    detail: str | None
    output = ""
    if task.cancelled():
        status, detail = JobStatus.KILLED, job.kill_reason
    elif (exc := task.exception()) is not None:
        logger.debug("job %s work raised", job.id, exc_info=exc)
        if job.kill_requested:
            status, detail = (
                JobStatus.KILLED,
                joined(job.kill_reason, safe_exception_detail(exc)),
            )
        else:
            status, detail = JobStatus.FAILED, safe_exception_detail(exc)
    else:
        outcome = task.result()
        if outcome.meta is not None:
            job.meta = dict(outcome.meta)
        if job.kill_requested and outcome.status is not JobStatus.KILLED:
            status, detail = JobStatus.KILLED, job.kill_reason
        elif job.kill_requested:
            # The work's own facts about the kill (a failed teardown, say) follow the reason.
            status, detail = JobStatus.KILLED, joined(job.kill_reason, outcome.detail)
            output = outcome.output or ""
        else:
            status, detail, output = outcome.status, outcome.detail, outcome.output or ""
    return status, detail, output
