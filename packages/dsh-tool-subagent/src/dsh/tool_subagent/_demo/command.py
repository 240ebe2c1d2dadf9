"""``dsh demo``: the installed real products against their bundled loopback models.

Each installed provider's optional ``demo()`` hook (``dsh.subagent.DemoPlan``, reached through
the entry points, so this module imports no product) brings its loopback model server and the
profile config pointing the product at it, with hermetic homes under a temporary directory
that is removed afterwards. The demo builds a :class:`Harness` from that in-memory profile. It
needs no key and talks only to 127.0.0.1. With only one of the shipped providers installed it
runs that one's scenarios and says how to install the other.

Independent scenarios (answers, background jobs, failures) run concurrently; the two cancellation
scenarios run one at a time afterwards so each can prove that no process of its own is left. The
result is one table (scenario, product, outcome, time) and a one-line summary; :func:`main`
returns 0 only if every scenario behaved exactly as expected.

``--executor ray`` (``_demo_jobs``) runs the background jobs on a Ray cluster instead. The
process checks then cannot rely on the demo's own pid (a Ray worker spawns those products), so
every count is also an own walk of ``/proc`` for processes carrying dsh's tree marker and the
demo run's tag (``_demo_walk``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dsh.subagent import installed_provider_kinds
from dsh.tool_subagent._demo.jobs import DemoJobs, DemoOptionError, demo_jobs
from dsh.tool_subagent._demo.plans import (
    InstalledPlan,
    demo_profile,
    installed_plans,
    missing_providers,
)
from dsh.tool_subagent._demo.scenarios import Scenario, Stage, scenario_phases
from dsh.tool_subagent._demo.walk import new_run_tag, tagged, tagged_marked_processes
from dsh.tool_subagent._harness import Harness, default_tool_name
from dsh.tool_subagent._known_providers import KNOWN_PROVIDERS
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
    "title",
]

logger = logging.getLogger("dsh.tool_subagent")


def _listed(products: Sequence[str]) -> str:
    if len(products) == 1:
        return f"the real {products[0]} product"
    return f"the real {', '.join(products[:-1])} and {products[-1]} products"


def title(products: Sequence[str]) -> str:
    """The table's title, naming the products that ran."""
    return f"dsh demo: {_listed(products)} against loopback model servers"


TITLE = title(tuple(known.product for known in KNOWN_PROVIDERS))


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
    #: What a partial install lacks (the demo ran the installed half).
    note: str | None = None
    #: Where the background jobs ran and what the checks could see, when not in this process.
    executor_note: str | None = None

    @property
    def products(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(row.product for row in self.rows))

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
            many = len(self.products) > 1
            what = (
                "answered, ran as background jobs, reported failures with a safe diagnostic and"
                " were cancelled"
                if many
                else "answered, ran as a background job, reported a failure with a safe"
                " diagnostic and was cancelled"
            )
            return (
                f"All {total} scenarios behaved as expected in {self.seconds:.1f} s:"
                f" {_listed(self.products)} {what} leaving no process behind"
                " (loopback model servers, no key, no network)."
            )
        bad = [f"{r.scenario} / {r.product}" for r in self.rows if not r.ok]
        text = f"{len(bad)} of {total} scenarios did not behave as expected (marked ✗)"
        if bad:
            text += ": " + "; ".join(bad)
        if self.leftover:
            text += f"; {self.leftover} marked process(es) outlived the demo"
        return text + ". Run `dsh doctor` to check the installed products."


async def _timed(stage: Stage, scenario: Scenario, limit_s: float) -> Row:
    name, product, body = scenario
    began = time.monotonic()
    try:
        async with asyncio.timeout(limit_s):
            ok, outcome = await body(stage)
    except TimeoutError:
        ok, outcome = False, f"did not finish within {limit_s:.0f} s"
    except Exception as exc:
        logger.debug("demo scenario %r failed", name, exc_info=exc)
        ok, outcome = False, f"raised {type(exc).__name__}"
    return Row(name, product, outcome, time.monotonic() - began, ok)


def _leftover(plans: Sequence[InstalledPlan], tag: str) -> list[int]:
    """Pids of the demo's product processes still alive (blocking briefly): those any installed
    plan finds that this process started, and those the walk finds carrying the run's tag (a
    Ray worker's spawns included)."""
    found = {pid for p in plans for pid in p.plan.leftover_processes(os.getpid())}
    return sorted(found | set(tagged_marked_processes(tag)))


async def _run_scenarios(
    root: Path, plans: Sequence[InstalledPlan], jobs: DemoJobs, tag: str
) -> list[Row]:
    workspace = root / "workspace"
    workspace.mkdir()
    async with AsyncExitStack() as stack:
        models = {
            p.plan.product: await stack.enter_async_context(p.plan.model(root)) for p in plans
        }
        configs = [(p.kind, tagged(models[p.plan.product].provider_config(), tag)) for p in plans]
        async with Harness.from_profile(demo_profile(configs, jobs.table)) as harness:
            stage = Stage(
                harness=harness,
                caller=Caller(session_id="dsh-demo", cwd=str(workspace)),
                models=models,
                tools={p.plan.product: default_tool_name(p.kind) for p in plans},
                leftover=lambda: _leftover(plans, tag),
                wait_s=jobs.wait_s,
            )
            rows: list[Row] = []
            for phase in scenario_phases([(p.plan.product, p.plan.scenarios) for p in plans]):
                async with asyncio.TaskGroup() as group:
                    tasks = [group.create_task(_timed(stage, s, jobs.scenario_s)) for s in phase]
                rows.extend(task.result() for task in tasks)
    return rows


def _plans() -> tuple[list[InstalledPlan], str | None, str | None]:
    """The installed plans, what stops the demo (if anything), and a partial install's note."""
    kinds = installed_provider_kinds()
    note = missing_providers(kinds)
    try:
        plans = installed_plans(kinds)
    except LookupError as exc:
        return [], str(exc), None
    if not plans:
        return [], note or "no installed provider offers a demo", None
    return plans, None, note


async def run_demo(jobs: DemoJobs | None = None) -> DemoReport:
    """Run every scenario and return the report (prints nothing).

    ``jobs`` says where background jobs run (:func:`~dsh.tool_subagent._demo.jobs.demo_jobs`;
    by default in this process).
    """
    began = time.monotonic()
    jobs = jobs if jobs is not None else demo_jobs()
    plans, problem, note = _plans()
    if problem is not None:
        return DemoReport((), time.monotonic() - began, problem=problem)
    tag = new_run_tag()
    root = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="dsh-demo-"))
    try:
        rows = await _run_scenarios(root, plans, jobs, tag)
    finally:
        await asyncio.to_thread(shutil.rmtree, root, ignore_errors=True)
    leftover = await asyncio.to_thread(_leftover, plans, tag)
    seconds = time.monotonic() - began
    return DemoReport(
        tuple(rows), seconds, leftover=len(leftover), note=note, executor_note=jobs.note
    )


def render(report: DemoReport, console: Console) -> None:
    """Print the one table and the one-line summary."""
    from rich.table import Table
    from rich.text import Text

    if report.rows:
        table = Table(title=title(report.products), title_justify="left")
        for column in ("scenario", "product", "outcome", "time"):
            table.add_column(column, justify="right" if column == "time" else "left")
        for row in report.rows:
            mark, style = ("✓", "green") if row.ok else ("✗", "red")
            outcome = Text.assemble((mark, style), " ", row.outcome)
            table.add_row(row.scenario, row.product, outcome, f"{row.seconds:.1f} s")
        console.print(table, highlight=False)
    style = "bold green" if report.ok else "bold red"
    console.print(report.summary, style=style, soft_wrap=True, highlight=False, markup=False)
    for note in (report.executor_note, report.note):
        if note is not None:
            console.print(note, style="yellow", soft_wrap=True, highlight=False, markup=False)


def _serve(plans: Sequence[InstalledPlan], note: str | None, err: Console, jobs: DemoJobs) -> int:
    from dsh.tool_subagent._demo.serve import serve

    if note is not None:
        err.print(note, style="yellow", soft_wrap=True, highlight=False, markup=False)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(exit_code_on_signal(lambda: serve(plans, jobs=jobs.table)))
    # Ctrl-C, SIGTERM and SIGHUP are the way to stop a server: the servers are down by now.
    err.print("dsh demo --serve: stopped", style="bold", highlight=False)
    return 0


def main(
    console: Console | None = None,
    *,
    serve: bool = False,
    executor: str | None = None,
    address: str | None = None,
    max_runs_per_node: int | None = None,
) -> int:
    """``dsh demo``: run, print the table and summary, return the exit code (0 only if all ok).

    ``serve``: keep the loopback model servers up for ``dsh run`` / ``dsh mcp`` instead (the
    printed profile then carries the ``[jobs]`` table of the options). ``executor``,
    ``address`` and ``max_runs_per_node`` are the ``[jobs]`` keys of the same names; a bad one
    is reported (exit 2) before anything starts.
    """
    from rich.console import Console

    out = console if console is not None else Console()
    err = Console(stderr=True) if console is None else out
    try:
        jobs = demo_jobs(executor, address, max_runs_per_node)
    except DemoOptionError as exc:
        err.print(
            f"dsh demo: {exc}", style="bold red", soft_wrap=True, highlight=False, markup=False
        )
        return 2
    if serve:
        plans, problem, note = _plans()
        if problem is None:
            return _serve(plans, note, err, jobs)
    reports: list[DemoReport] = []

    async def demo() -> int:
        reports.append(await run_demo(jobs))
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
