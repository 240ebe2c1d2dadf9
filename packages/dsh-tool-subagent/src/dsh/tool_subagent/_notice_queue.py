"""Completion notices pulled onto tool results: the one channel every host's model sees.

A background job that settles unreported leaves a notice for its owner; the owner's next tool
result carries it, each notice once. One result carries at most :data:`MAX_NOTICES_PER_RESULT`
notices and :data:`MAX_NOTICE_CHARS` characters (a single longer notice still goes alone); the
rest wait for the following result. The MCP server and the framework adapters share this.
"""

from __future__ import annotations

from collections import deque

from dsh.jobs import JobOwner, JobRegistry

__all__ = ["MAX_NOTICES_PER_RESULT", "MAX_NOTICE_CHARS", "NoticeQueue"]

#: The most completion notices one tool result carries; later ones ride the next result.
MAX_NOTICES_PER_RESULT = 5
#: The most notice characters one tool result carries (a single longer notice still goes alone).
MAX_NOTICE_CHARS = 2000


class NoticeQueue:
    """The completion notices of one owner, taken from the registry as results are built."""

    def __init__(self, owner: JobOwner, jobs: JobRegistry) -> None:
        self._owner = owner
        self._jobs = jobs
        self._riding: deque[str] = deque()  # taken from the registry, not yet on a result

    def for_result(self) -> str | None:
        """The notices to append to the tool result being returned now (each once), or None.

        Pulled from the registry at the moment the result is built, so a job the model has
        already read, waited on or killed by then brings no notice.
        """
        self._riding.extend(self._jobs.take_notices(self._owner))
        taken: list[str] = []
        size = 0
        while self._riding and len(taken) < MAX_NOTICES_PER_RESULT:
            notice = self._riding[0]
            if taken and size + len(notice) > MAX_NOTICE_CHARS:
                break
            taken.append(self._riding.popleft())
            size += len(notice)
        return "\n".join(taken) if taken else None
