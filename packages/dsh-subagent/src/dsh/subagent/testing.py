"""Test helpers shipped with the seam: a scripted provider, the provider conformance suite and the
scripting base of the products' fake model servers.

``FakeProvider`` runs no process; ``run_provider_conformance`` checks any provider (the product
providers run it against the real products) and raises ``AssertionError`` naming each violation.
``ScriptedModelServer`` (with ``ModelRequest``) is what every product's loopback model server
scripts with: ``queue(*replies, match=...)``, ``route=``, ``default=``, ``requests``,
``wait_for_requests``, ``release_stalls``; a third-party provider's fake server builds on it too.
``start_request`` builds the request a provider's ``start()`` receives; each product provider's
``testing`` module wraps it as ``make_start_request`` with its own descriptor name.
``result_of`` starts one run, waits for its result and closes it.
"""

from __future__ import annotations

from pathlib import Path

from dsh.subagent._conformance import ConformanceReport, run_provider_conformance
from dsh.subagent._fake import FakeProvider, FakeRun
from dsh.subagent._model_script import (
    MAX_RECORDED_REQUESTS,
    NO_REPLY_MESSAGE,
    ModelRequest,
    ScriptedModelServer,
)
from dsh.subagent._types import (
    Descriptor,
    Parent,
    ResolvedStartRequest,
    SubagentProvider,
    SubagentResult,
    TextBlock,
)

__all__ = [
    "MAX_RECORDED_REQUESTS",
    "NO_REPLY_MESSAGE",
    "ConformanceReport",
    "FakeProvider",
    "FakeRun",
    "ModelRequest",
    "ScriptedModelServer",
    "result_of",
    "run_provider_conformance",
    "start_request",
]


def start_request(
    cwd: str | Path | None, *texts: str, provider: str, session_id: str = "dsh-test"
) -> ResolvedStartRequest:
    """A ``ResolvedStartRequest`` of one text block per ``texts`` from a parent at ``cwd``."""
    return ResolvedStartRequest(
        prompt=tuple(TextBlock(text) for text in texts),
        parent=Parent(session_id=session_id, cwd=None if cwd is None else str(cwd)),
        descriptor=Descriptor(provider=provider),
    )


async def result_of(provider: SubagentProvider, request: ResolvedStartRequest) -> SubagentResult:
    """Start one run of ``provider``, wait for its result, and close the run (also when the wait
    is cancelled or times out)."""
    run = await provider.start(request)
    try:
        return await run.result()
    finally:
        await run.aclose()
