"""Warm starts (``prewarm``, issue 16): back-to-back delegations, warm dsh vs the official SDK.

Run: ``uv run python tests-e2e/benchmarks/run.py --prewarm [--runs N] [--products ...]``.

For each product, one dsh provider with ``prewarm = N`` (``--prewarm N``, default 1) and the
official SDK (used as its docs
use it, exactly as in run.py's end-to-end phase) take turns, one delegation each, back to back
with no pause: ``--runs`` times ``--e2e-per-round`` pairs, after one unrecorded pair (the first dsh
start is cold and starts the warming). What is counted, for both:

- *end-to-end*: the call → the answer in hand **and** the product process that served it gone
  (dsh: ``aclose()`` returned, which it does only after whole-tree exit; the SDK: its context or
  generator has ended, which waits for its CLI). Exactly what run.py counts. The background
  replacement of the warm process that the run took is **not** counted: it starts once the run is
  published and overlaps the run and the pause-free next delegation; a next delegation that
  arrives before it is ready waits for it (the pool's rule), and that wait **is** counted.
- *time to answer*: the call → the answer in hand.
- how many dsh starts found their warm process ready (hits) or had to wait for it or start cold.

The idle cost: with ``prewarm = 2`` and the machine otherwise quiet, the RSS of each warm
process's whole tree (the product and its descendants, not the supervisor) and the CPU the
tree used over 5 s of idleness.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

import psutil
from run import (
    ANSWER,
    OUR_TREES,
    Bench,
    ClaudeBench,
    CodexBench,
    ModelServers,
    _request,
    answered_then_closed,
)

from dsh.subagent import StopReason
from dsh.subagent_claude_code import ClaudeCodeProvider, ClaudeCodeProviderConfig
from dsh.subagent_codex import CodexProvider, CodexProviderConfig

__all__ = ["run_prewarm"]

TARGET_WARM_RATIO = 0.5
IDLE_WARM = 2
IDLE_WINDOW_S = 5.0


def _warm_provider(bench: Bench, prewarm: int) -> CodexProvider | ClaudeCodeProvider:
    cold = bench.dsh_provider("warm")
    fields = {**cold.config.model_dump(), "prewarm": prewarm}
    if isinstance(cold, CodexProvider):
        return CodexProvider(CodexProviderConfig.model_validate(fields))
    return ClaudeCodeProvider(ClaudeCodeProviderConfig.model_validate(fields))


async def _dsh_once(
    provider: CodexProvider | ClaudeCodeProvider, cwd: Path, product: str
) -> tuple[float, float]:
    began = time.perf_counter()
    run = await provider.start(_request(cwd, "BENCH-E2E answer please", product))
    process = run.process
    if process is not None:
        OUR_TREES.add(process.tree_id)
    result, answered = await answered_then_closed(run.result(), run.aclose)
    total = time.perf_counter() - began
    if result.stop_reason is not StopReason.COMPLETED or result.text.strip() != ANSWER:
        raise RuntimeError(f"dsh warm run ended {result.stop_reason}: {result.diagnostic}")
    return answered - began, total


async def _sdk_once(bench: Bench) -> tuple[float, float]:
    began = time.perf_counter()
    text, answered = await bench.sdk_once("BENCH-E2E answer please")
    total = time.perf_counter() - began
    if text.strip() != ANSWER:
        raise RuntimeError(f"unexpected SDK answer {text[:80]!r}")
    return answered - began, total


def _tree_rss_and_cpu(pid: int) -> tuple[int, float]:
    root = psutil.Process(pid)
    members = [root, *root.children(recursive=True)]
    rss, cpu = 0, 0.0
    for member in members:
        try:
            rss += member.memory_info().rss
            times = member.cpu_times()
            cpu += times.user + times.system
        except psutil.Error:
            continue
    return rss, cpu


async def _idle_cost(bench: Bench) -> dict[str, Any]:
    provider = _warm_provider(bench, IDLE_WARM)
    cwd = bench._dir("ws", "warm")
    try:
        await _dsh_once(provider, cwd, bench.product)
        pool = provider.warm_pool
        for _ in range(1200):  # bounded: 60 s
            if len(pool.idle()) >= IDLE_WARM:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # let start-up work finish before the idle window
        pids = [warm.process.pid for warm in pool.idle() if warm.process is not None]
        before = [await asyncio.to_thread(_tree_rss_and_cpu, pid) for pid in pids]
        await asyncio.sleep(IDLE_WINDOW_S)
        after = [await asyncio.to_thread(_tree_rss_and_cpu, pid) for pid in pids]
    finally:
        await provider.aclose()
    return {
        "warm_processes": len(pids),
        "rss_mb_each": [round(rss / 1e6, 1) for rss, _ in after],
        "idle_cpu_ms_each_over_5s": [
            round((a[1] - b[1]) * 1000, 1) for a, b in zip(after, before, strict=True)
        ],
    }


def _median_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 1) if values else float("nan")


async def _product(bench: Bench, pairs: int, prewarm: int) -> dict[str, Any]:
    provider = _warm_provider(bench, prewarm)
    cwd = bench._dir("ws", "warm")
    dsh: list[tuple[float, float]] = []
    sdk: list[tuple[float, float]] = []
    try:
        await _dsh_once(provider, cwd, bench.product)  # cold; starts the warming
        await _sdk_once(bench)
        pool = provider.warm_pool
        taken0, missed0 = pool.taken, pool.missed
        ready = 0
        for index in range(pairs):
            order = ("dsh", "sdk") if index % 2 == 0 else ("sdk", "dsh")
            for variant in order:
                if variant == "dsh":
                    ready += 1 if pool.idle() else 0
                    dsh.append(await _dsh_once(provider, cwd, bench.product))
                else:
                    sdk.append(await _sdk_once(bench))
        taken, missed = pool.taken - taken0, pool.missed - missed0
    finally:
        await provider.aclose()
    ratios = [d[1] / s[1] for d, s in zip(dsh, sdk, strict=True)]
    ratio = statistics.median(ratios)
    return {
        "pairs": pairs,
        "prewarm": prewarm,
        "dsh_warm_e2e_ms": _median_ms([d[1] for d in dsh]),
        "dsh_warm_e2e_range_ms": [
            _median_ms([min(d[1] for d in dsh)]),
            _median_ms([max(d[1] for d in dsh)]),
        ],
        "sdk_e2e_ms": _median_ms([s[1] for s in sdk]),
        "sdk_e2e_range_ms": [
            _median_ms([min(s[1] for s in sdk)]),
            _median_ms([max(s[1] for s in sdk)]),
        ],
        "dsh_warm_answer_ms": _median_ms([d[0] for d in dsh]),
        "sdk_answer_ms": _median_ms([s[0] for s in sdk]),
        "e2e_ratio_median_of_pairs": round(ratio, 3),
        "e2e_ratio_of_medians": round(
            statistics.median([d[1] for d in dsh]) / statistics.median([s[1] for s in sdk]), 3
        ),
        "warm_ready_at_start": ready,
        "warm_taken": taken,
        "cold_starts": missed,
        "target": TARGET_WARM_RATIO,
        "met": ratio <= TARGET_WARM_RATIO,
    }


def _print(report: dict[str, Any]) -> None:
    meta = report["meta"]
    print(f"dsh warm starts vs the official SDK — {meta['date']}, load {meta['load']}")
    for product, figures in report["products"].items():
        if "error" in figures:
            print(f"  {product}: ERROR {figures['error']}")
            continue
        print(
            f"  {product}: end-to-end median {figures['dsh_warm_e2e_ms']} ms "
            f"{figures['dsh_warm_e2e_range_ms']} vs SDK {figures['sdk_e2e_ms']} ms "
            f"{figures['sdk_e2e_range_ms']}; answer {figures['dsh_warm_answer_ms']} vs "
            f"{figures['sdk_answer_ms']} ms; {figures['pairs']} pairs, prewarm = "
            f"{figures['prewarm']}; "
            f"warm ready {figures['warm_ready_at_start']}, taken {figures['warm_taken']}, "
            f"cold {figures['cold_starts']}"
        )
        verdict = "PASS" if figures["met"] else "MISS"
        print(
            f"  {verdict} {product}: warm end-to-end / SDK (median of paired ratios): "
            f"{figures['e2e_ratio_median_of_pairs']}x (ratio of medians "
            f"{figures['e2e_ratio_of_medians']}x; target {TARGET_WARM_RATIO}x)"
        )
        idle = figures["idle"]
        print(
            f"  idle cost, {idle['warm_processes']} warm processes: RSS per whole tree "
            f"{idle['rss_mb_each']} MB; CPU over {IDLE_WINDOW_S:.0f} s idle "
            f"{idle['idle_cpu_ms_each_over_5s']} ms"
        )


async def _bench(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    import datetime
    import importlib
    import os

    await asyncio.to_thread(importlib.import_module, "openai_codex")
    await asyncio.to_thread(importlib.import_module, "claude_agent_sdk")
    servers = await ModelServers.start()
    products: dict[str, Any] = {}
    try:
        for product in args.products:
            cls = CodexBench if product == "codex" else ClaudeBench
            bench = cls(servers, root, 1, 0.0, 1)
            try:
                figures = await _product(bench, args.runs * args.e2e_per_round, args.prewarm)
                figures["idle"] = await _idle_cost(bench)
            except Exception as exc:
                figures = {"error": repr(exc)[:300]}
            products[product] = figures
    finally:
        await servers.aclose()
    return {
        "meta": {
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "load": [round(x, 2) for x in os.getloadavg()],
            "cpus": os.cpu_count(),
        },
        "products": products,
    }


def run_prewarm(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """The ``--prewarm`` mode of run.py: measure, print, and return the report."""
    report = asyncio.run(_bench(args, root))
    if not args.no_table:
        _print(report)
    return report
