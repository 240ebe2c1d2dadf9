"""The execution-backend seam: where a job's work runs (in this process, or on a Ray cluster).

The registry keeps ids, owners, admission, status and notices; an :class:`Executor` only runs a
work to its end. :class:`LocalExecutor` (the default) awaits it in this process. An executor that
runs work elsewhere (``portable``) needs it as plain data, a :class:`PortableWork`.
"""

from __future__ import annotations

import importlib
import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from dsh.jobs._types import JobOutcome

if TYPE_CHECKING:
    from dsh.jobs._store import JobStore

__all__ = ["Executor", "JobStarted", "JobWork", "LocalExecutor", "PortableWork"]

JobWork = Callable[[], Awaitable[JobOutcome]]
"""A job's work: an async callable returning its :class:`JobOutcome`."""

JobStarted = Callable[[str | None], None]
"""Called by an executor once a job's work begins to run, with where it runs (or ``None``)."""


@dataclass(frozen=True, slots=True)
class PortableWork:
    """A job's work as plain data: the async function ``target`` called with ``arguments``.

    ``target`` is ``"package.module:function"``, importable wherever the work runs; the function
    takes ``arguments`` as keyword arguments and returns a :class:`JobOutcome`. ``arguments`` must
    survive a JSON round trip unchanged (strings, numbers, booleans, ``None``, lists, string-keyed
    objects), so no live object, and nothing a JSON dump cannot show, ever travels with a job.
    Calling the work runs it here, which is what :class:`LocalExecutor` does.
    """

    target: str
    arguments: Mapping[str, Any]

    def __post_init__(self) -> None:
        module, sep, name = self.target.partition(":")
        if not sep or not module or not name.isidentifier():
            raise ValueError('PortableWork.target must be "package.module:function"')
        try:
            same = json.loads(json.dumps(dict(self.arguments))) == dict(self.arguments)
        except (TypeError, ValueError):
            same = False
        if not same:
            raise ValueError("PortableWork.arguments must be plain JSON values")

    def to_json(self) -> str:
        """The work as one JSON text (what a job's record keeps for a detached worker)."""
        return json.dumps({"target": self.target, "arguments": dict(self.arguments)})

    @classmethod
    def from_json(cls, text: str) -> PortableWork:
        data = json.loads(text)
        return cls(target=data["target"], arguments=data["arguments"])

    async def __call__(self) -> JobOutcome:
        function = resolve(self.target)
        outcome = await function(**self.arguments)
        if not isinstance(outcome, JobOutcome):
            raise TypeError("a portable work's target must return a JobOutcome")
        return outcome


def resolve(target: str) -> Callable[..., Any]:
    """The callable named by ``"package.module:function"``."""
    module, _, name = target.partition(":")
    function = getattr(importlib.import_module(module), name)
    if not callable(function):
        raise TypeError(f"{target} is not callable")
    return function  # type: ignore[no-any-return]


class Executor(ABC):
    """Runs one job's work at a time per :meth:`execute` call; the registry owns everything else.

    The contract every executor keeps:

    - :meth:`execute` calls ``started(where)`` once, when the work begins to run (``where`` names
      the node or worker, or is ``None``), and returns the work's :class:`JobOutcome`. An
      executor with ``queues = True`` may first wait for capacity; the job is ``queued`` meanwhile.
    - **Cancel.** When the task awaiting :meth:`execute` is cancelled, the executor passes the
      cancellation on to the work and returns (or raises ``CancelledError``) only after the work
      has ended, its teardown included: a killed job settles after whole-tree exit, wherever it
      ran. A further cancellation while that teardown runs does not cut it short. A job cancelled
      while still queued never starts.
    - **Failures of the executor itself** (a lost worker or node, an unreachable cluster) raise
      :class:`~dsh.jobs.errors.JobExecutorError`, whose message is safe to show a model and whose
      ``__cause__`` holds the raw error.
    - **Close.** :meth:`aclose` is called once every job has settled; it releases what the
      executor holds (connections, nothing the jobs own) and is idempotent.
    """

    #: Work must be a :class:`PortableWork` (it runs in another process or on another node).
    portable: ClassVar[bool] = False
    #: A started job may wait for capacity before it runs (reported as ``queued``).
    queues: ClassVar[bool] = False
    #: The profile's name of this executor (``[jobs] executor``).
    name: ClassVar[str]
    #: Each work runs in a process of its own that outlives a cancelled :meth:`execute` when
    #: :func:`~dsh.jobs.detach_requested` says so (the job is let go, not killed).
    detaches: ClassVar[bool] = False
    #: The work runs from the job's record (the registry stores it as JSON at start).
    runs_from_store: ClassVar[bool] = False

    def attach(self, store: JobStore) -> None:  # noqa: B027 - most executors need no store
        """Called by the registry with its job store when it opens it, before any job runs."""

    @abstractmethod
    async def execute(self, work: JobWork, started: JobStarted) -> JobOutcome:
        """Run ``work`` to its end, keeping the cancel contract above."""

    async def aclose(self) -> None:
        """Release the executor's resources; every job has settled by now. Idempotent."""
        return None


class LocalExecutor(Executor):
    """Awaits each work in this process, on the registry's event loop (the default)."""

    name = "local"

    async def execute(self, work: JobWork, started: JobStarted) -> JobOutcome:
        started(None)
        return await work()
