"""``dsh demo`` runs the real products against the loopback servers and exits 0 in under 60 s.

The demo runs as a program (``sys.executable -m dsh.tool_subagent._cli demo``) through
``dsh.subprocess``; its one table is parsed row by row and every outcome is checked.
"""

from __future__ import annotations

import asyncio
import io
import re
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from dsh.subprocess import Collect, SpawnSpec, default_runtime
from dsh.tool_subagent._demo import command as demo
from dsh.tool_subagent._demo.scenarios import owned_marked_processes

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(120)]

DEMO_LIMIT_S = 60.0
JOB = r"subagent-[0-9a-f]{12}"
COUNTS = r"dsh-marked processes: [1-9]\d* mid-turn → 0 after"
EXPECTED_ROWS = [
    ("foreground answer", "Codex", re.escape('✓ answer: "Hello from Codex."')),
    ("foreground answer", "Claude Code", re.escape('✓ answer: "Hello from Claude Code."')),
    (
        "background job",
        "Codex",
        f"✓ {JOB} → job_output: "
        + re.escape('"Codex finished in the background." [status: completed]'),
    ),
    (
        "background job",
        "Claude Code",
        f"✓ {JOB} → job_output: "
        + re.escape('"Claude Code finished in the background." [status: completed]'),
    ),
    (
        "model failure",
        "Codex",
        re.escape(
            "✓ HTTP 503 → Product subagent failure (product: Codex; stage: turn; category: "
            "httpConnectionFailed; HTTP status: 503)"
        ),
    ),
    (
        "model failure",
        "Claude Code",
        re.escape(
            "✓ HTTP 401 → Product subagent failure (product: Claude Code; stage: query-run; "
            "category: authentication; HTTP status: 401; exit code: 1)"
        ),
    ),
    ("cancel via job_kill", "Codex", f"✓ job_kill {JOB} → \\[status: killed\\]; {COUNTS}"),
    ("cancel the tool call", "Claude Code", f"✓ tool call cancelled; {COUNTS}"),
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
    spec = SpawnSpec(
        argv=[sys.executable, "-m", "dsh.tool_subagent._cli", "demo"],
        env={"COLUMNS": "250", "TMPDIR": str(temp)},
        stdout=Collect(1 << 16),
        stderr=Collect(1 << 16),
    )
    began = time.monotonic()
    proc = await default_runtime().spawn(spec)
    try:
        async with asyncio.timeout(DEMO_LIMIT_S):
            outcome = await proc.wait()
    finally:
        await proc.aclose()
    elapsed = time.monotonic() - began
    out, err = proc.collected("stdout").text, proc.collected("stderr").text
    assert outcome.exit_code == 0, out + err
    assert elapsed < DEMO_LIMIT_S
    assert err == ""
    lines = out.splitlines()
    assert lines[0].rstrip() == demo.TITLE
    assert _table_rows(out, "┃") == [["scenario", "product", "outcome", "time"]]
    rows = _table_rows(out, "│")
    assert len(rows) == len(EXPECTED_ROWS)
    for row, (scenario, product, outcome_pattern) in zip(rows, EXPECTED_ROWS, strict=True):
        assert row[:2] == [scenario, product]
        assert re.fullmatch(outcome_pattern, row[2]), row[2]
        assert re.fullmatch(r"\d+\.\d s", row[3]), row[3]
    summary = lines[-1]
    assert re.fullmatch(
        r"All 8 scenarios behaved as expected in \d+\.\d s: the real Codex and Claude Code"
        r" products answered, ran as background jobs, reported failures with a safe diagnostic"
        r" and were cancelled leaving no process behind \(loopback model servers, no key, no"
        r" network\)\.",
        summary,
    ), summary
    assert _dsh_dirs(temp) == []
    assert await asyncio.to_thread(owned_marked_processes, proc.pid) == []


# A partial install runs the installed half (issue 15); only an install with neither provider
# stops the demo.
def test_demo_names_the_extras_to_install_and_fails_with_no_provider(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    message = (
        "the Codex provider and the Claude Code provider are not installed; install them"
        ' with pip install "dsh-tool-subagent[all]"'
    )
    monkeypatch.setattr(demo, "installed_provider_kinds", lambda: ())
    buffer = io.StringIO()
    code = demo.main(console=Console(file=buffer, width=300))
    assert code == 1
    assert buffer.getvalue() == f"dsh demo did not run: {message}\n"


@pytest.mark.parametrize(
    ("installed", "product", "note"),
    [
        (
            "codex",
            "Codex",
            'the Claude Code provider is not installed; install it with pip install "dsh-tool-'
            'subagent[claude-code]" (or "dsh-tool-subagent[all]" for everything)',
        ),
        (
            "claude-code",
            "Claude Code",
            'the Codex provider is not installed; install it with pip install "dsh-tool-'
            'subagent[codex]" (or "dsh-tool-subagent[all]" for everything)',
        ),
    ],
)
def test_partial_install_runs_the_installed_half_and_names_the_other(
    monkeypatch: pytest.MonkeyPatch, installed: str, product: str, note: str
) -> None:
    monkeypatch.setattr(demo, "installed_provider_kinds", lambda: (installed,))
    buffer = io.StringIO()
    code = demo.main(console=Console(file=buffer, width=300))
    out = buffer.getvalue()
    assert code == 0, out
    lines = out.splitlines()
    assert (
        lines[0].rstrip() == f"dsh demo: the real {product} product against loopback model servers"
    )
    expected = [row for row in EXPECTED_ROWS if row[1] == product]
    rows = _table_rows(out, "│")
    assert len(rows) == len(expected) == 4
    for row, (scenario, row_product, outcome_pattern) in zip(rows, expected, strict=True):
        assert row[:2] == [scenario, row_product]
        assert re.fullmatch(outcome_pattern, row[2]), row[2]
    assert re.fullmatch(
        rf"All 4 scenarios behaved as expected in \d+\.\d s: the real {product} product"
        r" answered, ran as a background job, reported a failure with a safe diagnostic and was"
        r" cancelled leaving no process behind \(loopback model servers, no key, no network\)\.",
        lines[-2],
    ), lines[-2]
    assert lines[-1] == note
    assert owned_marked_processes() == []
