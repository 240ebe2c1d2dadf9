"""``dsh demo --executor ray``: the demo's background jobs on the cluster, the REAL products.

The demo runs as a program, a Ray driver of its own (``address = "auto"`` through
``RAY_ADDRESS``). While it runs, this test samples the processes carrying a dsh tree marker
below each node's raylet (``RayKit.nodes_running_marked``), so it sees the background jobs'
products run on the worker nodes, not in the demo process. Every row must behave as expected, the
cancel rows' counts must see the worker's products mid-turn and none after, and nothing marked
may be left on any node when it exits.
"""

from __future__ import annotations

import asyncio
import re
import sys
from typing import Any

import pytest

from dsh.subprocess import marked_processes
from dsh.subprocess.testing import run_to_exit

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(240)]

JOB = r"subagent-[0-9a-f]{12}"
COUNTS = r"dsh-marked processes: [1-9]\d* mid-turn → 0 after"
#: Each row's scenario, product and what its outcome must match on the Ray executor (the exact
#: local texts are tests-e2e/test_demo.py's; here, what moved to the cluster is checked).
ROWS = [
    ("foreground answer", "Codex", "✓ answer: .*"),
    ("foreground answer", "Claude Code", "✓ answer: .*"),
    ("background job", "Codex", f"✓ {JOB} → job_output: .*Codex.* \\[status: completed\\]"),
    ("background job", "Claude Code", f"✓ {JOB} → job_output: .*Claude.* \\[status: completed\\]"),
    ("model failure", "Codex", "✓ HTTP 503 → Product subagent failure .*"),
    ("model failure", "Claude Code", "✓ HTTP 401 → Product subagent failure .*"),
    ("cancel via job_kill", "Codex", f"✓ job_kill {JOB} → \\[status: killed\\]; {COUNTS}"),
    ("cancel the tool call", "Claude Code", f"✓ tool call cancelled; {COUNTS}"),
]
NOTE = (
    "Background jobs ran on the Ray executor (address: auto). The demo's model servers listen"
    " on 127.0.0.1 and its workspace is a temporary directory here, so its jobs can run only on"
    " Ray nodes on this machine; its process checks walk this machine's /proc (dsh's tree"
    " marker and the demo's own tag), not other machines."
)


def table_rows(text: str, rule: str) -> list[list[str]]:
    lines = text.splitlines()
    return [[c.strip() for c in line.split(rule)[1:-1]] for line in lines if line.startswith(rule)]


async def test_dsh_demo_runs_its_background_jobs_on_the_cluster_and_leaves_nothing(
    ray_kit: Any,
) -> None:
    argv = [sys.executable, "-m", "dsh.tool_subagent._cli", "demo", "--executor", "ray"]
    argv += ["--address", "auto", "--max-runs-per-node", "3"]
    env = {"COLUMNS": "250", **ray_kit.driver_env()}
    with ray_kit.nodes_running_marked() as nodes:
        ran = await run_to_exit(argv, env=env, timeout_s=200)
    out, err = ran.stdout, ran.stderr
    assert ran.exit_code == 0, out + err
    assert table_rows(out, "┃") == [["scenario", "product", "outcome", "time"]]
    rows = table_rows(out, "│")
    assert len(rows) == len(ROWS), out
    for row, (scenario, product, pattern) in zip(rows, ROWS, strict=True):
        assert row[:2] == [scenario, product]
        assert re.fullmatch(pattern, row[2]), row[2]
    lines = out.splitlines()
    assert lines[-2].startswith("All 8 scenarios behaved as expected in "), lines[-2]
    assert lines[-1] == NOTE
    # The background jobs' products ran below a worker node's raylet (the head runs no job).
    assert nodes, "no marked process was ever seen below a raylet"
    assert nodes <= {node.node_id for node in ray_kit.workers}
    ray_kit.assert_no_marked()
    assert await asyncio.to_thread(marked_processes, owner_pid=ran.pid) == []
