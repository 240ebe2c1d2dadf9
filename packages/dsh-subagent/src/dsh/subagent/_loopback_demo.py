"""``LoopbackDemo``: a product's ``dsh demo`` part on its loopback model server.

Both shipped providers script the demo the same way: a fake model server (a
``ScriptedModelServer``) whose replies are queued per scenario token, the provider's profile
config pointing the product at it, and a second server answering everything for ``dsh demo
--serve``. What is the product's: the server class, the config, how a task is kept busy and how a
model failure is scripted (and the safe diagnostic the run then reports).
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from dsh.subagent._demo import DemoFailure, DemoModel, DemoPlan, DemoScenario

if TYPE_CHECKING:  # the model-script machinery is the fake servers', which no run imports
    from dsh.subagent._model_script import ModelRequest

__all__ = ["LoopbackDemo", "LoopbackServer"]


class LoopbackServer(Protocol):
    """What the demo uses of a product's fake model server (both products' servers are one)."""

    @property
    def base_url(self) -> str: ...

    @property
    def requests(self) -> Sequence[ModelRequest]: ...

    def queue_text(self, text: str, *, match: str | None = None) -> None: ...

    async def __aenter__(self) -> Any: ...

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any, /) -> Any: ...


ServerT = TypeVar("ServerT", bound=LoopbackServer)


class _Model(Generic[ServerT]):
    """The running server; each token's replies are queued with ``match=token``."""

    def __init__(self, root: Path, demo: LoopbackDemo[ServerT]) -> None:
        self._root = root
        self._demo = demo
        self.server = demo.server(serving=False)

    def provider_config(self) -> dict[str, Any]:
        return self._demo.config(self._root, self.server.base_url)

    def answer(self, token: str, text: str) -> None:
        self.server.queue_text(text, match=token)

    def busy(self, token: str) -> None:
        self._demo.busy(self.server, token)

    def fail(self, token: str) -> DemoFailure:
        return self._demo.fail(self.server, token)

    def tasks_seen(self) -> list[str]:
        return [r.task or "" for r in self.server.requests]


class LoopbackDemo(abc.ABC, Generic[ServerT]):
    """A product's ``dsh demo`` part on its loopback model server; ``plan()`` is the plan.

    A subclass sets ``product``, ``scenarios`` and ``serve_answer`` and defines the hooks: its
    server, its profile config for a server, how a task is kept busy, how a model failure is
    scripted, and how its leftover processes are found.
    """

    product: ClassVar[str]
    scenarios: ClassVar[tuple[DemoScenario, ...]]
    serve_answer: ClassVar[str]

    def plan(self) -> DemoPlan:
        """The ``DemoPlan``: ``model`` scripts a server per token, ``serve`` answers everything."""

        @asynccontextmanager
        async def model(root: Path) -> AsyncIterator[DemoModel]:
            running = _Model(root, self)
            async with running.server:
                yield running

        @asynccontextmanager
        async def serve(root: Path) -> AsyncIterator[Mapping[str, Any]]:
            answering = self.server(serving=True)
            async with answering:
                yield self.config(root, answering.base_url)

        return DemoPlan(
            product=self.product,
            scenarios=self.scenarios,
            model=model,
            serve=serve,
            serve_answer=self.serve_answer,
            leftover_processes=self.leftover_processes,
        )

    @abc.abstractmethod
    def server(self, *, serving: bool) -> ServerT:
        """A fresh, unstarted server; ``serving``: it answers every request with
        ``serve_answer`` (``dsh demo --serve``)."""

    @abc.abstractmethod
    def config(self, root: Path, base_url: str) -> dict[str, Any]:
        """The provider's profile config for the server at ``base_url`` (a home under ``root``)."""

    @abc.abstractmethod
    def busy(self, server: ServerT, token: str) -> None:
        """Keep the task carrying ``token`` busy mid-turn."""

    @abc.abstractmethod
    def fail(self, server: ServerT, token: str) -> DemoFailure:
        """Script the model failure of the task carrying ``token``; return what the run reports."""

    @abc.abstractmethod
    def leftover_processes(self, owner_pid: int) -> Sequence[int]:
        """The pids of this product's processes still alive that ``owner_pid`` started."""
