"""``loopback_demo_plan``: a product's ``dsh demo`` part on its loopback model server.

Both shipped providers script the demo the same way: a fake model server (a
``ScriptedModelServer``) whose replies are queued per scenario token, the provider's profile
config pointing the product at it, and a second server answering everything for ``dsh demo
--serve``. What is the product's: the server class, the config, how a task is kept busy and how a
model failure is scripted (and the safe diagnostic the run then reports).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from dsh.subagent._demo import DemoFailure, DemoModel, DemoPlan, DemoScenario
from dsh.subagent._model_script import ModelRequest

__all__ = ["LoopbackServer", "loopback_demo_plan"]


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

    def __init__(
        self,
        root: Path,
        server: ServerT,
        config: Callable[[Path, str], dict[str, Any]],
        busy: Callable[[ServerT, str], None],
        fail: Callable[[ServerT, str], DemoFailure],
    ) -> None:
        self._root = root
        self.server = server
        self._config = config
        self._busy = busy
        self._fail = fail

    def provider_config(self) -> dict[str, Any]:
        return self._config(self._root, self.server.base_url)

    def answer(self, token: str, text: str) -> None:
        self.server.queue_text(text, match=token)

    def busy(self, token: str) -> None:
        self._busy(self.server, token)

    def fail(self, token: str) -> DemoFailure:
        return self._fail(self.server, token)

    def tasks_seen(self) -> list[str]:
        return [r.task or "" for r in self.server.requests]


def loopback_demo_plan(
    *,
    product: str,
    scenarios: tuple[DemoScenario, ...],
    server: Callable[[], ServerT],
    serving_server: Callable[[], ServerT],
    serve_answer: str,
    config: Callable[[Path, str], dict[str, Any]],
    busy: Callable[[ServerT, str], None],
    fail: Callable[[ServerT, str], DemoFailure],
    leftover_processes: Callable[[int], Sequence[int]],
) -> DemoPlan:
    """A ``DemoPlan`` on a loopback model server.

    ``server()`` makes the scripted server (started when the plan's ``model`` is entered);
    ``serving_server()`` one that answers every request with ``serve_answer`` (``dsh demo
    --serve``). ``config(root, base_url)`` is the provider's profile config for a server, its
    hermetic home under ``root``. ``busy(server, token)`` keeps the task carrying ``token`` busy
    mid-turn; ``fail(server, token)`` scripts its model failure and returns what the run reports.
    """

    @asynccontextmanager
    async def model(root: Path) -> AsyncIterator[DemoModel]:
        running = _Model(root, server(), config, busy, fail)
        async with running.server:
            yield running

    @asynccontextmanager
    async def serve(root: Path) -> AsyncIterator[Mapping[str, Any]]:
        answering = serving_server()
        async with answering:
            yield config(root, answering.base_url)

    return DemoPlan(
        product=product,
        scenarios=scenarios,
        model=model,
        serve=serve,
        serve_answer=serve_answer,
        leftover_processes=leftover_processes,
    )
