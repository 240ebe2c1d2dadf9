"""The Ray executor vs the local one: per-job overhead, and the throughput of a burst of jobs.

Run: ``uv run python tests-e2e/benchmarks/ray_executor.py [--sequential 10] [--jobs 50]``
(``run.py --ray`` runs it too, after its own report).

It starts a local Ray cluster of 3 nodes (a head and 2 workers, each declaring one ``dsh_node``;
token auth on, dashboard off, Ray's files under a temporary directory) and the benchmark's
loopback model servers (``model_servers.py``, a process of their own), then measures, for each
executor, with the real products:

- **per-job overhead**: ``--sequential`` background Codex jobs one after another, start to
  settlement; the figure is the median of the Ray ones minus the median of the local ones (the
  first Ray job, which connects and starts its actor, is reported apart as ``ray_cold_s``);
- **throughput**: ``--jobs`` background jobs (Codex and Claude Code alternating) started at once;
  jobs per second from the first start to the last settlement. Locally every job runs at once;
  on Ray at most ``--runs-per-node`` per node.

All nodes share this machine's cores, so the burst shows the executor's costs, not the gain of
more machines. Prints a JSON report (and writes it with ``--json``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Before Ray is imported: workers use this environment as installed (no `uv run` replication).
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import ray
from ray._private import ray_constants
from ray._private.authentication_test_utils import reset_auth_token_state
from ray.cluster_utils import Cluster

from dsh.jobs import JobStatus
from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.subagent_codex.testing import hermetic_env, write_codex_home
from dsh.subprocess import ManagedProcess, SpawnSpec, default_runtime
from dsh.tool_subagent import Caller, Harness

HERE = Path(__file__).resolve().parent
ANSWER = "BENCH-OK"
TOOLS = ("subagent_codex", "subagent_claude_code")


async def start_model_servers() -> tuple[ManagedProcess, dict[str, str]]:
    spec = SpawnSpec(
        argv=[sys.executable, "-I", str(HERE / "model_servers.py")],
        stdin="pipe",
        stdout="pipe",
        stderr="inherit",
        grace_ms=2000,
    )
    proc = await default_runtime().spawn(spec)
    assert proc.stdout is not None
    async with asyncio.timeout(30):
        return proc, json.loads(await proc.stdout.readline())


def start_cluster(root: Path, runs_per_node: int) -> Cluster:
    os.environ.update(
        {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32),
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_TMPDIR": str(root),
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # every node on 127.0.0.1
            "RAY_memory_monitor_refresh_ms": "0",  # a shared machine: no OOM kills of ours
        }
    )
    reset_auth_token_state()
    ray_constants.ENABLE_RAY_CLUSTER = False  # read at import, like the variable above
    (root / "ray").mkdir(parents=True)
    node: dict[str, Any] = {
        "num_cpus": 1,
        "resources": {"dsh_node": 1},
        "node_ip_address": "127.0.0.1",
    }
    head = {**node, "include_dashboard": False, "temp_dir": str(root / "ray")}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    for _ in range(2):
        cluster.add_node(wait=True, **node)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, namespace="dsh-bench")
    return cluster


def profile(root: Path, urls: dict[str, str], jobs: dict[str, Any]) -> dict[str, Any]:
    home = write_codex_home(root / "codex-home", urls["codex"], "mock-model")
    common = {"stderr": "discard", "dispose_grace_ms": 2000}
    return {
        "provider": [
            {"kind": "codex", "config": {**common, "env": hermetic_env(home)}},
            {
                "kind": "claude-code",
                "config": {**common, "env": claude_env(root / "claude", urls["claude"])},
            },
        ],
        "jobs": {"max_concurrent_jobs_per_owner": 100, **jobs},
    }


async def one_job(harness: Harness, caller: Caller, tool: str, n: int) -> float:
    began = time.perf_counter()
    result = await harness.tool(tool).call(
        {"description": "bench", "prompt": f"bench job {n}", "run_in_background": True}, caller
    )
    assert result.value is not None, result.text
    snapshot = await harness.jobs.wait(str(result.value["job_id"]), 300, caller)
    elapsed = time.perf_counter() - began
    output = harness.jobs.read(snapshot.id, caller)
    if snapshot.status is not JobStatus.COMPLETED or ANSWER not in output:
        raise RuntimeError(f"job {snapshot.id} ended {snapshot.status_line}")
    return elapsed


async def measure(data: dict[str, Any], caller: Caller, args: argparse.Namespace) -> dict[str, Any]:
    async with Harness.from_profile(data) as harness:
        await one_job(harness, caller, TOOLS[0], -1)  # bootstraps CODEX_HOME (and, on Ray, the
        # connection and a first actor): reported apart, never in the figures below
        sequential = [await one_job(harness, caller, TOOLS[0], n) for n in range(args.sequential)]
        began = time.perf_counter()
        burst = await asyncio.gather(
            *(one_job(harness, caller, TOOLS[n % 2], n) for n in range(args.jobs))
        )
        wall = time.perf_counter() - began
    return {
        "sequential_s": sequential,
        "sequential_median_s": statistics.median(sequential),
        "burst_wall_s": wall,
        "burst_jobs_per_s": len(burst) / wall,
        "burst_job_median_s": statistics.median(burst),
    }


async def bench(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    workspace = root / "workspace"
    workspace.mkdir()
    caller = Caller(session_id="bench", cwd=str(workspace))
    servers, urls = await start_model_servers()
    try:
        local = await measure(profile(root / "local", urls, {}), caller, args)
        started = time.perf_counter()
        # Ray installs signal handlers: the cluster starts in the main thread (the loop waits).
        cluster = start_cluster(root / "cluster", args.runs_per_node)
        cluster_start_s = time.perf_counter() - started
        try:
            ray_jobs = {"executor": "ray", "max_runs_per_node": args.runs_per_node}
            remote = await measure(profile(root / "ray", urls, ray_jobs), caller, args)
        finally:
            ray.shutdown()
            cluster.shutdown()  # type: ignore[no-untyped-call]
    finally:
        assert servers.stdin is not None
        servers.stdin.close()
        await servers.aclose()
    return {
        "meta": {
            "cpus": os.cpu_count(),
            "ray": ray.__version__,
            "nodes": 3,
            "runs_per_node": args.runs_per_node,
            "sequential": args.sequential,
            "jobs": args.jobs,
            "cluster_start_s": cluster_start_s,
        },
        "local": local,
        "ray": remote,
        "per_job_overhead_median_s": remote["sequential_median_s"] - local["sequential_median_s"],
        "throughput_ratio_ray_vs_local": remote["burst_jobs_per_s"] / local["burst_jobs_per_s"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--sequential", type=int, default=10, help="jobs one by one (10)")
    parser.add_argument("--jobs", type=int, default=50, help="jobs in the burst (50)")
    parser.add_argument("--runs-per-node", type=int, default=2, help="max_runs_per_node (2)")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="dsh-ray-bench-"))
    try:
        report = asyncio.run(bench(args, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    text = json.dumps(report, indent=2)
    if args.json is not None:
        args.json.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
