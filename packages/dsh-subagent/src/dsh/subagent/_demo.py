"""What a provider offers ``dsh demo`` through an optional ``demo()`` hook.

A provider class may define ``demo() -> DemoPlan`` (a classmethod or staticmethod), next to
``doctor()``. ``dsh demo`` finds it through the ``dsh.subagent.providers`` entry points and runs
the plan of every installed provider, so the tool layer never imports a product. The plan names
the product, the standard scenarios it takes part in, its loopback model (scripted per scenario,
or answering everything for ``dsh demo --serve``) and how to find processes it left behind.

The scenarios themselves (what is called through the tools and what must come back) belong to
the tool layer, which alone holds the tools; a provider only scripts its model for them. Calling
the hook must start nothing: the servers start when a plan's ``model`` or ``serve`` is entered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

__all__ = ["DEMO_ERROR_BODY", "DemoFailure", "DemoModel", "DemoPlan", "DemoScenario"]

DemoScenario = Literal[
    "foreground answer",
    "background job",
    "model failure",
    "cancel via job_kill",
    "cancel the tool call",
]
"""The demo's standard scenarios a provider can take part in."""

#: A secret-looking model error body: a plan's failure must never show it in model-visible text.
DEMO_ERROR_BODY = "demo-error-body sk-demo-never-shown"


@dataclass(frozen=True, slots=True)
class DemoFailure:
    """A scripted model failure: its short cause (``HTTP 503``) and the exact safe diagnostic."""

    cause: str
    diagnostic: str


class DemoModel(Protocol):
    """A product's loopback model server, up while its context is entered, scripted per token.

    A scenario puts a unique token in its task text; the script for a token applies to every
    request of that product whose task carries it, so concurrent scenarios never mix.
    """

    def provider_config(self) -> dict[str, Any]:
        """The provider's profile ``config`` for this server (hermetic homes, loopback URLs)."""
        ...

    def answer(self, token: str, text: str) -> None:
        """Answer the task carrying ``token`` with ``text``."""
        ...

    def busy(self, token: str) -> None:
        """Keep the task carrying ``token`` busy mid-turn (a product process stays alive)."""
        ...

    def fail(self, token: str) -> DemoFailure:
        """Fail the task carrying ``token`` with :data:`DEMO_ERROR_BODY`; what the run reports."""
        ...

    def tasks_seen(self) -> list[str]:
        """The task texts the server has received so far."""
        ...


@dataclass(frozen=True, slots=True)
class DemoPlan:
    """One provider's part of ``dsh demo``.

    ``model(root)`` and ``serve(root)`` keep their hermetic homes under ``root`` (the demo
    removes it afterwards). ``serve`` answers every request with ``serve_answer`` and yields the
    provider's profile ``config``. ``leftover_processes(owner_pid)`` lists the pids of this
    product's processes still alive that ``owner_pid`` started (the demo's cancellations count
    them mid-turn and afterwards).
    """

    product: str
    scenarios: tuple[DemoScenario, ...]
    model: Callable[[Path], AbstractAsyncContextManager[DemoModel]]
    serve: Callable[[Path], AbstractAsyncContextManager[Mapping[str, Any]]]
    serve_answer: str
    leftover_processes: Callable[[int], Sequence[int]]
