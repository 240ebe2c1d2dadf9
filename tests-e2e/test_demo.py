"""``dsh demo`` runs the real products against the loopback servers and exits 0 in under 60 s.

The demo runs as a program (``sys.executable -m dsh.tool_subagent._cli demo``) through
``dsh.subprocess``; its one table is parsed row by row and every outcome is checked. The expected
rows follow the product table: each of its products, in its order, in every scenario its plan
takes part in.
"""

from __future__ import annotations

import asyncio
import io
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from rich.console import Console

from dsh.subagent import DemoPlan, DemoScenario
from dsh.subprocess.testing import run_to_exit
from dsh.tool_subagent._demo import command as demo
from dsh.tool_subagent._demo.scenarios import owned_marked_processes
from dsh.tool_subagent._known_providers import KNOWN_PROVIDERS, KnownProvider, load_provider

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(120)]

DEMO_LIMIT_S = 60.0
JOB = r"subagent-[0-9a-f]{12}"
COUNTS = r"dsh-marked processes: [1-9]\d* mid-turn → 0 after"
#: The demo's scenarios in its order (each product of the table in table order within one).
SCENARIOS: tuple[DemoScenario, ...] = (
    "foreground answer",
    "background job",
    "model failure",
    "cancel via job_kill",
    "cancel the tool call",
)
#: The shipped products' model failures, pinned: what each real product reports.
PINNED_FAILURES = {
    "Codex": re.escape(
        "✓ HTTP 503 → Product subagent failure (product: Codex; stage: turn; category: "
        "httpConnectionFailed; HTTP status: 503)"
    ),
    "Claude Code": re.escape(
        "✓ HTTP 401 → Product subagent failure (product: Claude Code; stage: query-run; "
        "category: authentication; HTTP status: 401; exit code: 1)"
    ),
}


def _outcome(scenario: DemoScenario, product: str) -> str:
    """The pattern of a row's outcome: the same words for every product, but for the shipped
    products' pinned failures (any other product: a safe failure line naming it)."""
    if scenario == "foreground answer":
        return re.escape(f'✓ answer: "Hello from {product}."')
    if scenario == "background job":
        said = re.escape(f'"{product} finished in the background." [status: completed]')
        return f"✓ {JOB} → job_output: {said}"
    if scenario == "model failure":
        named = re.escape(f"Product subagent failure (product: {product}; ")
        return PINNED_FAILURES.get(product, f"✓ HTTP \\d{{3}} → {named}[^()]*\\)")
    if scenario == "cancel via job_kill":
        return f"✓ job_kill {JOB} → \\[status: killed\\]; {COUNTS}"
    return f"✓ tool call cancelled; {COUNTS}"


def _plan(known: KnownProvider) -> DemoPlan:
    """The product's demo plan, through its entry point as ``dsh demo`` finds it."""
    plan: DemoPlan = type(load_provider(known.kind)).demo()  # type: ignore[attr-defined]
    return plan


def expected_rows(products: Sequence[KnownProvider]) -> list[tuple[str, str, str]]:
    """(scenario, product, outcome pattern) per row of a demo of ``products``, in table order."""
    plans = {known.product: _plan(known).scenarios for known in products}
    return [
        (scenario, product, _outcome(scenario, product))
        for scenario in SCENARIOS
        for product, takes_part in plans.items()
        if scenario in takes_part
    ]


def _dsh_dirs(root: Path) -> list[str]:
    return sorted(path.name for path in root.glob("dsh-*"))


def _table_rows(text: str, rule: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.split(rule)[1:-1]]
        for line in text.splitlines()
        if line.startswith(rule)
    ]


async def test_dsh_demo_exits_0_with_every_scenario_behaving(tmp_path: Path) -> None:
    # A temporary dir of its own: a user's `dsh demo` running beside the suite has its dirs in
    # the shared one, and they are not this demo's leftovers.
    temp = tmp_path / "tmp"
    temp.mkdir()
    began = time.monotonic()
    ran = await run_to_exit(
        [sys.executable, "-m", "dsh.tool_subagent._cli", "demo"],
        env={"COLUMNS": "250", "TMPDIR": str(temp)},
        timeout_s=DEMO_LIMIT_S,
    )
    elapsed = time.monotonic() - began
    out, err = ran.stdout, ran.stderr
    assert ran.exit_code == 0, out + err
    assert elapsed < DEMO_LIMIT_S
    assert err == ""
    lines = out.splitlines()
    assert lines[0].rstrip() == demo.TITLE
    assert _table_rows(out, "┃") == [["scenario", "product", "outcome", "time"]]
    rows = _table_rows(out, "│")
    expected = expected_rows(KNOWN_PROVIDERS)
    assert len(rows) == len(expected)
    for row, (scenario, product, outcome_pattern) in zip(rows, expected, strict=True):
        assert row[:2] == [scenario, product]
        assert re.fullmatch(outcome_pattern, row[2]), row[2]
        assert re.fullmatch(r"\d+\.\d s", row[3]), row[3]
    summary = lines[-1]
    *others, last = [known.product for known in KNOWN_PROVIDERS]
    products = f"{', '.join(others)} and {last}"  # "A and B", "A, B and C"
    assert re.fullmatch(
        rf"All {len(expected)} scenarios behaved as expected in \d+\.\d s: the real"
        rf" {re.escape(products)} products answered, ran as background jobs, reported failures"
        r" with a safe diagnostic and were cancelled leaving no process behind \(loopback model"
        r" servers, no key, no network\)\.",
        summary,
    ), summary
    assert _dsh_dirs(temp) == []
    assert await asyncio.to_thread(owned_marked_processes, ran.pid) == []


# A partial install runs the installed half (issue 15); only an install with no provider stops
# the demo. The notes name every row of the product table that is not installed.
def test_demo_names_the_extras_to_install_and_fails_with_no_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(demo, "installed_provider_kinds", lambda: ())
    buffer = io.StringIO()
    code = demo.main(console=Console(file=buffer, width=300))
    assert code == 1
    # The note's wording, per product table, is test_demo_report.py's.
    assert buffer.getvalue() == f"dsh demo did not run: {demo.missing_providers(())}\n"


@pytest.mark.parametrize("known", KNOWN_PROVIDERS, ids=lambda known: known.kind)
def test_partial_install_runs_the_installed_one_and_names_the_others(
    monkeypatch: pytest.MonkeyPatch, known: KnownProvider
) -> None:
    monkeypatch.setattr(demo, "installed_provider_kinds", lambda: (known.kind,))
    buffer = io.StringIO()
    code = demo.main(console=Console(file=buffer, width=300))
    out = buffer.getvalue()
    assert code == 0, out
    lines = out.splitlines()
    product = known.product
    assert (
        lines[0].rstrip() == f"dsh demo: the real {product} product against loopback model servers"
    )
    expected = expected_rows([known])
    rows = _table_rows(out, "│")
    assert len(rows) == len(expected) == 4
    for row, (scenario, row_product, outcome_pattern) in zip(rows, expected, strict=True):
        assert row[:2] == [scenario, row_product]
        assert re.fullmatch(outcome_pattern, row[2]), row[2]
    assert re.fullmatch(
        rf"All 4 scenarios behaved as expected in \d+\.\d s: the real {re.escape(product)} product"
        r" answered, ran as a background job, reported a failure with a safe diagnostic and was"
        r" cancelled leaving no process behind \(loopback model servers, no key, no network\)\.",
        lines[-2],
    ), lines[-2]
    assert lines[-1] == demo.missing_providers([known.kind])  # names every other product
    assert owned_marked_processes() == []
