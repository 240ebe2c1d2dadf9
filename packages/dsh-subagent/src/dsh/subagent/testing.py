"""Test helpers shipped with the seam: a scripted provider, the provider conformance suite and the
scripting base of the products' fake model servers.

``FakeProvider`` runs no process; ``run_provider_conformance`` checks any provider (the product
providers run it against the real products) and raises ``AssertionError`` naming each violation.
``ScriptedModelServer`` (with ``ModelRequest``) is what every product's loopback model server
scripts with: ``queue(*replies, match=...)``, ``route=``, ``default=``, ``requests``,
``wait_for_requests``, ``release_stalls``; a third-party provider's fake server builds on it too.
``ThreadedModelServer`` serves one on 127.0.0.1 from a thread (its lifecycle, ``base_url`` and
stalls written once); a product writes its ``ModelRequestHandler`` (Claude Code's server does).
``start_request`` builds the request a provider's ``start()`` receives; each product provider's
``testing`` module wraps it as ``make_start_request`` with its own descriptor name.
``result_of`` starts one run, waits for its result and closes it. ``INVALID_BASE_FIELDS`` lists
values every provider config must reject in the fields ``ProviderConfigBase`` gives it.
``decoy_program`` plants a product command that only leaves evidence that it ran, for a test that
a provider never runs a host's own copy of its product. ``BareRun`` wraps a run and forwards only
the ``SubagentRun`` protocol, as a run of a provider written before the optional activity stamp.
``demo_plan`` loads a provider's demo plan through its entry point, as ``dsh demo`` does;
``check_demo_plan`` checks one the way ``dsh demo`` uses it and returns the configs it handed out.
``check_login_file_row`` checks a product provider's ``doctor()`` login-file row.
``write_distribution`` installs a distribution's metadata alone, for tests of discovery.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Self

from dsh.subagent._conformance import ConformanceReport, run_provider_conformance
from dsh.subagent._demo import DemoFailure, DemoPlan, DemoScenario
from dsh.subagent._discovery import PROVIDER_ENTRY_POINT_GROUP
from dsh.subagent._doctor import DoctorCheck
from dsh.subagent._fake import FakeProvider, FakeRun
from dsh.subagent._model_script import (
    MAX_RECORDED_REQUESTS,
    NO_REPLY_MESSAGE,
    ModelRequest,
    ScriptedModelServer,
)
from dsh.subagent._provider_base import ProviderBase
from dsh.subagent._threaded_server import ModelRequestHandler, ThreadedModelServer
from dsh.subagent._types import (
    Descriptor,
    Parent,
    ResolvedStartRequest,
    SubagentProvider,
    SubagentResult,
    SubagentRun,
    TextBlock,
)

__all__ = [
    "INVALID_BASE_FIELDS",
    "MAX_RECORDED_REQUESTS",
    "NO_REPLY_MESSAGE",
    "TYPED_SCHEMA",
    "TYPED_VALUE",
    "BareRun",
    "CheckedDemoPlan",
    "ConformanceReport",
    "FakeProvider",
    "FakeRun",
    "ModelRequest",
    "ModelRequestHandler",
    "ScriptedModelServer",
    "ThreadedModelServer",
    "check_demo_plan",
    "check_login_file_row",
    "decoy_program",
    "demo_plan",
    "result_of",
    "run_provider_conformance",
    "start_request",
    "write_distribution",
]

#: Values of the fields ``ProviderConfigBase`` gives every provider config that the config must
#: reject, each with the field its error names; a provider's tests add its own fields' cases.
INVALID_BASE_FIELDS: tuple[tuple[dict[str, object], str], ...] = (
    ({"provider_name": ""}, "provider_name"),
    ({"provider_name": "  "}, "provider_name"),
    ({"model": ""}, "model"),
    ({"dispose_grace_ms": 0}, "dispose_grace_ms"),
    ({"dispose_grace_ms": 2147483648}, "dispose_grace_ms"),
    ({"nice": -1}, "nice"),
    ({"nice": 20}, "nice"),
    ({"env_policy": "all"}, "env_policy"),
    ({"credential_env": ["A=B"]}, "credential_env"),
    ({"tool_env": [""]}, "tool_env"),
)

#: An output schema for typed-answer tests, and a value that matches it (its non-ASCII item
#: shows the answer's JSON is not escaped on the way).
TYPED_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {"failing": {"type": "array", "items": {"type": "string"}}},
    "required": ["failing"],
    "additionalProperties": False,
}
TYPED_VALUE: dict[str, object] = {"failing": ["test_a", "test_b ✓"]}


class BareRun:
    """Forwards the ``SubagentRun`` protocol of the run it wraps (``id``, ``result()``,
    ``cancel()``, ``aclose()``, ``async with``) and nothing else: no ``last_activity``, no
    ``first_activity``, no ``usage``, as a run of a provider written before them."""

    def __init__(self, run: SubagentRun) -> None:
        self._run = run
        self.id = run.id

    async def result(self) -> SubagentResult:
        return await self._run.result()

    def cancel(self, reason: str | None = None) -> None:
        self._run.cancel(reason)

    async def aclose(self) -> None:
        await self._run.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def demo_plan(kind: str) -> DemoPlan:
    """The plan the ``demo()`` hook of provider ``kind`` returns, reached as ``dsh demo`` reaches
    it: through its entry point (``dsh.subagent.providers``)."""
    (entry,) = [e for e in entry_points(group=PROVIDER_ENTRY_POINT_GROUP) if e.name == kind]
    plan = entry.load().demo()
    assert isinstance(plan, DemoPlan), plan
    return plan


def write_distribution(
    site: Path,
    name: str,
    version: str = "1.0",
    entry_points: str | None = None,
    *,
    suffix: str = ".dist-info",
) -> Path:
    """A distribution's metadata, as an installer writes it, in ``site`` (a folder to put on
    ``sys.path``) and no code: ``METADATA``, ``INSTALLER`` and the ``entry_points.txt`` text
    (``None``: no such file). For tests of discovery, which read only these files."""
    info = site / f"{name.replace('-', '_')}-{version}{suffix}"
    info.mkdir(parents=True)
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    (info / "METADATA").write_text(metadata, encoding="utf-8")
    (info / "INSTALLER").write_text("dsh.subagent.testing\n", encoding="utf-8")
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points, encoding="utf-8")
    return info


@dataclass(frozen=True)
class CheckedDemoPlan:
    """What :func:`check_demo_plan` checked: the plan, and the provider configs it handed out for
    its scripted model (under the root) and its serving model (under ``root / "served"``)."""

    plan: DemoPlan
    model_config: dict[str, Any]
    served_config: Mapping[str, Any]


async def check_demo_plan(
    kind: str, root: Path, *, cancel: DemoScenario, failure: DemoFailure
) -> CheckedDemoPlan:
    """Check the plan of provider ``kind`` (:func:`demo_plan`) the way ``dsh demo`` uses it: it
    takes part in every scenario, cancelling by ``cancel``; its scripted model, started under
    ``root``, has seen no task and scripts ``failure``; it serves under ``root / "served"``; no
    process of its is left. The product's own checks (its name and served answer, a hermetic
    home under the root, a loopback base URL) read what this returns."""
    plan = demo_plan(kind)
    assert plan.scenarios == ("foreground answer", "background job", "model failure", cancel)
    async with plan.model(root) as model:
        config = model.provider_config()
        assert model.tasks_seen() == []
        assert model.fail("FAIL-DEMO-PLAN") == failure
    async with plan.serve(root / "served") as served:
        pass
    assert list(plan.leftover_processes(os.getpid())) == []
    return CheckedDemoPlan(plan, config, served)


def check_login_file_row(provider: ProviderBase[Any], config_dir: Path, *, secret: str) -> None:
    """``doctor()``'s login-file row of ``provider``, whose product's config dir is ``config_dir``:
    ``absent``, then, in the same place, ``exists`` once the product's login file
    (``install.login_file``) is written there; no row, before or after, shows ``secret`` or the
    path."""
    before = provider.doctor()
    at = before.index(DoctorCheck("login file", "absent", True))
    (config_dir / provider.install.login_file).write_text("{}")
    after = provider.doctor()
    assert after[at] == DoctorCheck("login file", "exists", True)
    for rows in (before, after):
        assert secret not in repr(rows)
        assert str(config_dir) not in repr(rows)


def decoy_program(directory: Path, name: str) -> tuple[Path, Path]:
    """An executable ``directory/bin/<name>`` that only creates ``directory/<name>-ran``: the
    ``bin`` directory (to put first on ``PATH``) and that evidence file, which must stay absent."""
    bindir = directory / "bin"
    bindir.mkdir()
    evidence = directory / f"{name}-ran"
    program = bindir / name
    program.write_text(f"#!/bin/sh\ntouch '{evidence}'\n")
    program.chmod(0o755)
    return bindir, evidence


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
