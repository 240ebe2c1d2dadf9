"""``dsh demo``: the real Codex and Claude Code products against the bundled loopback models.

The demo builds a :class:`Harness` from an in-memory profile whose two providers' ``env`` point at
``dsh.subagent_codex.testing.FakeResponsesServer`` and
``dsh.subagent_claude_code.testing.FakeMessagesServer``, with hermetic homes under a temporary
directory that is removed afterwards. It needs no key and talks only to 127.0.0.1.

Independent scenarios (answers, background jobs, failures) run concurrently; the two cancellation
scenarios run one at a time afterwards so each can prove that no process of its own is left. The
result is one table (scenario, product, outcome, time) and a one-line summary; :func:`main`
returns 0 only if every scenario behaved exactly as expected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh.subagent import installed_provider_kinds
from dsh.tool_subagent._demo_scenarios import (
    Scenario,
    Stage,
    owned_marked_processes,
    scenario_phases,
)
from dsh.tool_subagent._harness import Harness
from dsh.tool_subagent._signals import exit_code_on_signal
from dsh.tool_subagent._tool import Caller

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "DemoReport",
    "Row",
    "demo_profile",
    "main",
    "missing_providers",
    "render",
    "run_demo",
]

logger = logging.getLogger("dsh.tool_subagent")

#: (provider kind, product, extra of dsh-tool-subagent that installs it)
REQUIRED_KINDS = (("codex", "Codex", "codex"), ("claude-code", "Claude Code", "claude-code"))
#: Each scenario is bounded; at most four phases run one after another.
SCENARIO_TIMEOUT_S = 12.0
DEMO_MODEL = "dsh-demo-model"
TITLE = "dsh demo: the real Codex and Claude Code products against loopback model servers"


@dataclass(frozen=True, slots=True)
class Row:
    """One table row."""

    scenario: str
    product: str
    outcome: str
    seconds: float
    ok: bool


@dataclass(frozen=True, slots=True)
class DemoReport:
    """The demo's rows, its wall time and any problem that stopped it from running."""

    rows: tuple[Row, ...]
    seconds: float
    problem: str | None = None
    leftover: int = 0

    @property
    def ok(self) -> bool:
        return (
            self.problem is None
            and bool(self.rows)
            and all(r.ok for r in self.rows)
            and not self.leftover
        )

    @property
    def summary(self) -> str:
        if self.problem is not None:
            return f"dsh demo did not run: {self.problem}"
        total = len(self.rows)
        if self.ok:
            return (
                f"All {total} scenarios behaved as expected in {self.seconds:.1f} s: the real Codex"
                " and Claude Code products answered, ran as background jobs, reported failures"
                " with a safe diagnostic and were cancelled leaving no process behind"
                " (loopback model servers, no key, no network)."
            )
        bad = [f"{r.scenario} / {r.product}" for r in self.rows if not r.ok]
        text = f"{len(bad)} of {total} scenarios did not behave as expected (marked ✗)"
        if bad:
            text += ": " + "; ".join(bad)
        if self.leftover:
            text += f"; {self.leftover} marked process(es) outlived the demo"
        return text + ". Run `dsh doctor` to check the installed products."


def missing_providers(kinds: Iterable[str]) -> str | None:
    """What to install when a product the demo needs is missing, else ``None``."""
    installed = set(kinds)
    missing = [(product, extra) for kind, product, extra in REQUIRED_KINDS if kind not in installed]
    if not missing:
        return None
    names = " and ".join(f"the {product} provider" for product, _ in missing)
    if len(missing) == 1:
        extra = missing[0][1]
        return (
            f'{names} is not installed; install it with pip install "dsh-tool-subagent[{extra}]"'
            ' (or "dsh-tool-subagent[all]" for everything)'
        )
    return f'{names} are not installed; install them with pip install "dsh-tool-subagent[all]"'


async def _timed(stage: Stage, scenario: Scenario) -> Row:
    name, product, body = scenario
    began = time.monotonic()
    try:
        async with asyncio.timeout(SCENARIO_TIMEOUT_S):
            ok, outcome = await body(stage)
    except TimeoutError:
        ok, outcome = False, f"did not finish within {SCENARIO_TIMEOUT_S:.0f} s"
    except Exception as exc:
        logger.debug("demo scenario %r failed", name, exc_info=exc)
        ok, outcome = False, f"raised {type(exc).__name__}"
    return Row(name, product, outcome, time.monotonic() - began, ok)


def demo_profile(root: Path, codex_url: str, claude_url: str) -> dict[str, Any]:
    """The demo's profile: both products, their hermetic homes under ``root``, loopback URLs."""
    from dsh.subagent_claude_code.testing import hermetic_env as claude_env
    from dsh.subagent_codex.testing import hermetic_env as codex_env
    from dsh.subagent_codex.testing import write_codex_home

    home = write_codex_home(root / "codex-home", codex_url, DEMO_MODEL)
    common = {"stderr": "discard", "dispose_grace_ms": 2000}
    return {
        "provider": [
            {"kind": "codex", "config": {"env": codex_env(home), **common}},
            {
                "kind": "claude-code",
                "config": {"env": claude_env(root / "claude", claude_url), **common},
            },
        ],
        "jobs": {"max_concurrent_jobs_per_owner": 10},
    }


async def _run_scenarios(root: Path) -> list[Row]:
    from dsh.subagent_claude_code.testing import Behaviour as ClaudeBehaviour
    from dsh.subagent_claude_code.testing import FakeMessagesServer
    from dsh.subagent_codex.testing import Behaviour as CodexBehaviour
    from dsh.subagent_codex.testing import FakeResponsesServer, RecordedRequest

    codex_script: dict[str, CodexBehaviour] = {}

    def route(request: RecordedRequest) -> CodexBehaviour | None:
        # The whole body, so a follow-up request of the same turn gets the same behaviour.
        for token, behaviour in codex_script.items():
            if token.encode() in request.body:
                return behaviour
        return None

    workspace = root / "workspace"
    workspace.mkdir()
    async with (
        FakeResponsesServer(route=route) as codex_server,
        FakeMessagesServer() as claude_server,
    ):
        profile = demo_profile(root, codex_server.base_url, claude_server.base_url)

        def script_claude(token: str, kind: Any, **fields: Any) -> None:
            claude_server.queue(ClaudeBehaviour(kind, match=token, **fields))

        async with Harness.from_profile(profile) as harness:
            stage = Stage(
                harness=harness,
                caller=Caller(session_id="dsh-demo", cwd=str(workspace)),
                script_codex=codex_script.__setitem__,
                script_claude=script_claude,
                codex_tasks=lambda: [r.task_text or "" for r in codex_server.model_requests],
                claude_tasks=lambda: [r.task or "" for r in claude_server.requests],
            )
            rows: list[Row] = []
            for phase in scenario_phases():
                async with asyncio.TaskGroup() as group:
                    tasks = [group.create_task(_timed(stage, s)) for s in phase]
                rows.extend(task.result() for task in tasks)
    return rows


async def run_demo() -> DemoReport:
    """Run every scenario and return the report (prints nothing)."""
    began = time.monotonic()
    problem = missing_providers(installed_provider_kinds())
    if problem is None:
        try:
            import dsh.subagent_claude_code.testing
            import dsh.subagent_codex.testing  # noqa: F401
        except ImportError as exc:
            logger.debug("demo fixtures failed to import", exc_info=exc)
            problem = (
                "a provider package is installed but broken; reinstall it with"
                ' pip install --force-reinstall "dsh-tool-subagent[all]"'
            )
    if problem is not None:
        return DemoReport((), time.monotonic() - began, problem=problem)
    root = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="dsh-demo-"))
    try:
        rows = await _run_scenarios(root)
    finally:
        await asyncio.to_thread(shutil.rmtree, root, ignore_errors=True)
    leftover = await asyncio.to_thread(owned_marked_processes)
    return DemoReport(tuple(rows), time.monotonic() - began, leftover=len(leftover))


def render(report: DemoReport, console: Console) -> None:
    """Print the one table and the one-line summary."""
    from rich.table import Table
    from rich.text import Text

    if report.rows:
        table = Table(title=TITLE, title_justify="left")
        for column in ("scenario", "product", "outcome", "time"):
            table.add_column(column, justify="right" if column == "time" else "left")
        for row in report.rows:
            mark, style = ("✓", "green") if row.ok else ("✗", "red")
            outcome = Text.assemble((mark, style), " ", row.outcome)
            table.add_row(row.scenario, row.product, outcome, f"{row.seconds:.1f} s")
        console.print(table, highlight=False)
    style = "bold green" if report.ok else "bold red"
    console.print(report.summary, style=style, soft_wrap=True, highlight=False, markup=False)


def _serve(err: Console) -> int:
    from dsh.tool_subagent._demo_serve import serve

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(exit_code_on_signal(serve))
    # Ctrl-C, SIGTERM and SIGHUP are the way to stop a server: the servers are down by now.
    err.print("dsh demo --serve: stopped", style="bold", highlight=False)
    return 0


def main(console: Console | None = None, *, serve: bool = False) -> int:
    """``dsh demo``: run, print the table and summary, return the exit code (0 only if all ok).

    ``serve``: keep the loopback model servers up for ``dsh run`` / ``dsh mcp`` instead.
    """
    from rich.console import Console

    out = console if console is not None else Console()
    err = Console(stderr=True) if console is None else out
    problem = missing_providers(installed_provider_kinds())
    if serve and problem is None:
        return _serve(err)
    reports: list[DemoReport] = []

    async def demo() -> int:
        reports.append(await run_demo())
        return 0

    try:
        with out.status("dsh demo: running the real products against loopback model servers…"):
            code = asyncio.run(exit_code_on_signal(demo))
    except KeyboardInterrupt:
        code = 130
    if not reports:
        # asyncio.run cancelled the demo: every run was closed and its tree exited first.
        err.print("dsh demo: interrupted", style="bold red")
        return code
    report = reports[0]
    if report.problem is not None:
        err.print(report.summary, style="bold red", soft_wrap=True, highlight=False, markup=False)
        return 1
    render(report, out)
    return 0 if report.ok else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
