"""Where a run's milliseconds go: a phase timeline of dsh and of the official SDK, per product.

Run: ``uv run python tests-e2e/benchmarks/trace.py [--products codex,claude-code] [--runs N]``.

Each run is timed from the call that starts it to whole-tree exit. dsh's phases come from
wrapping a few of its internal functions for the duration of this script (benchmark-only
introspection: nothing in dsh is changed); the SDK's come from the points its public API
exposes. dsh and the SDK alternate, against the same loopback model servers as ``run.py``.
The table shows each phase's median time from the start, and the median gap to the phase
before it, so the gap that grows is the one to look at. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench_report import PRODUCTS
from run import ANSWER, OUR_TREES, Bench, ClaudeBench, CodexBench, ModelServers, _request

from dsh.subagent import StopReason
from dsh.subagent_codex.testing import hermetic_env as codex_hermetic_env
from dsh.subprocess import _process, _runtime

Events = list[tuple[str, float]]


class Tracer:
    """Collects ``(label, perf_counter)`` events; wraps callables to record their entry/exit."""

    def __init__(self) -> None:
        self.events: Events = []
        self._undo: list[Callable[[], None]] = []

    def mark(self, label: str) -> None:
        self.events.append((label, time.perf_counter()))

    def wrap(self, owner: Any, name: str, label: str, *, entry: bool = False) -> None:
        original = getattr(owner, name)
        mark = self.mark
        if asyncio.iscoroutinefunction(original):

            @functools.wraps(original)
            async def traced_async(*args: Any, **kwargs: Any) -> Any:
                if entry:
                    mark(f"{label} (called)")
                try:
                    return await original(*args, **kwargs)
                finally:
                    mark(label)

            setattr(owner, name, traced_async)
        else:

            @functools.wraps(original)
            def traced(*args: Any, **kwargs: Any) -> Any:
                if entry:
                    mark(f"{label} (called)")
                try:
                    return original(*args, **kwargs)
                finally:
                    mark(label)

            setattr(owner, name, traced)
        self._undo.append(lambda: setattr(owner, name, original))

    def first_time(self, owner: Any, name: str, label: str, ready: Callable[[Any], bool]) -> None:
        """Record ``label`` once per object, after the first call that makes ``ready`` true."""
        original = getattr(owner, name)
        mark = self.mark
        seen: set[int] = set()

        @functools.wraps(original)
        def traced(obj: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return original(obj, *args, **kwargs)
            finally:
                if id(obj) not in seen and ready(obj):
                    seen.add(id(obj))
                    mark(label)

        setattr(owner, name, traced)
        self._undo.append(lambda: setattr(owner, name, original))

    def undo(self) -> None:
        while self._undo:
            self._undo.pop()()


@contextmanager
def _dsh_subprocess_points(tracer: Tracer) -> Iterator[None]:
    tracer.wrap(_runtime.SubprocessRuntime, "spawn", "spawn() returned", entry=True)
    tracer.first_time(
        _process.ManagedProcess, "_poll_exit", "program exited (seen)", lambda p: p._outcome
    )
    tracer.wrap(_process.ManagedProcess, "_notify_gone", "whole tree gone (proven)")
    tracer.wrap(_process.ManagedProcess, "aclose", "ManagedProcess.aclose() returned", entry=True)
    try:
        yield
    finally:
        tracer.undo()


#: Each product's trace points: ``(module, class or None, callable, label, entry)``.
_POINTS: dict[str, tuple[tuple[str, str | None, str, str, bool], ...]] = {
    "codex": (
        ("dsh.subprocess", "SpawnChecks", "reap_orphans", "orphan check done", True),
        ("dsh.subagent_codex._run", "CodexRun", "initialize", "initialize answered", True),
        ("dsh.subagent_codex._run", "CodexRun", "start_thread", "thread/start answered", False),
        ("dsh.subagent_codex._run", "CodexRun", "begin_turn", "turn/start sent", False),
        ("dsh.subagent_codex._run", "CodexRun", "_settle", "result settled", False),
    ),
    "claude-code": (
        ("dsh.subprocess", "SpawnChecks", "reap_orphans", "orphan check done", True),
        (
            "dsh.subagent_claude_code._run",
            "ClaudeCodeRun",
            "spawn",
            "CLI spawned and connected",
            True,
        ),
        (
            "dsh.subagent_claude_code._run",
            "ClaudeCodeRun",
            "wait_ready",
            "initialize answered",
            False,
        ),
        ("dsh.subagent_claude_code._run", "ClaudeCodeRun", "_on_prompt_sent", "prompt sent", False),
        (
            "dsh.subagent_claude_code._run",
            "ClaudeCodeRun",
            "_arm_dispose",
            "result message read",
            False,
        ),
        ("dsh.subagent_claude_code._transport", "DshTransport", "close", "transport closed", True),
    ),
}


def _product_points(tracer: Tracer, product: str) -> None:
    for module_name, class_name, name, label, entry in _POINTS[product]:
        module = importlib.import_module(module_name)
        owner = module if class_name is None else getattr(module, class_name)
        tracer.wrap(owner, name, label, entry=entry)


async def _dsh_once(bench: Bench, tracer: Tracer, nice: int | str | None) -> Events:
    provider = bench.dsh_provider("trace")
    provider.config = provider.config.model_copy(update={"nice": nice})
    request = _request(bench._dir("ws", "trace"), "BENCH-E2E answer please", bench.product)
    tracer.events = []
    tracer.mark("start() called")
    run = await provider.start(request)
    tracer.mark("start() returned")
    try:
        result = await run.result()
        tracer.mark("result() returned")
    finally:
        await run.aclose()
        tracer.mark("run.aclose() returned")
    if result.stop_reason is not StopReason.COMPLETED or result.text.strip() != ANSWER:
        raise RuntimeError(f"dsh run ended {result.stop_reason}")
    return tracer.events


async def _codex_sdk_once(bench: CodexBench, tracer: Tracer) -> Events:
    """The sync client in a worker thread, as ``run.py`` measures it (its Quickstart's usage)."""
    sdk = importlib.import_module("openai_codex")
    workspace = bench._dir("ws", "trace-sdk")
    config = sdk.CodexConfig(env=codex_hermetic_env(bench._home("trace-sdk")), cwd=str(workspace))

    def body() -> str:
        with sdk.Codex(config) as codex:
            tracer.mark("Codex entered (spawned + initialize)")
            thread = codex.thread_start(
                approval_mode=sdk.ApprovalMode.deny_all, ephemeral=True, cwd=str(workspace)
            )
            tracer.mark("thread_start() returned")
            result = thread.run("BENCH-E2E answer please")
            tracer.mark("result() returned")
        return str(result.final_response or "")

    tracer.events = []
    tracer.mark("start() called")
    answer = await asyncio.to_thread(body)
    tracer.mark("run.aclose() returned")
    if answer.strip() != ANSWER:
        raise RuntimeError("the SDK's answer was wrong")
    return tracer.events


async def _claude_sdk_once(bench: ClaudeBench, tracer: Tracer) -> Events:
    sdk = importlib.import_module("claude_agent_sdk")
    options = bench.sdk_options("trace-sdk")
    tracer.events = []
    tracer.mark("start() called")
    text = ""
    first = True
    async for message in sdk.query(prompt="BENCH-E2E answer please", options=options):
        if first:
            tracer.mark("first message")
            first = False
        if isinstance(message, sdk.ResultMessage):
            text = str(message.result or "")
            tracer.mark("result() returned")
    tracer.mark("run.aclose() returned")
    if text.strip() != ANSWER:
        raise RuntimeError("the SDK's answer was wrong")
    return tracer.events


def _table(title: str, runs: list[Events]) -> str:
    order: list[str] = []
    for events in runs:
        for label, _ in events:
            if label not in order:
                order.append(label)
    lines = [title, f"{'phase':48} {'from start':>11} {'gap':>8}"]
    previous: list[float] | None = None
    for label in order:
        offsets: list[float] = []
        for events in runs:
            t0 = events[0][1]
            times = [t for name, t in events if name == label]
            if times:
                offsets.append((times[-1] - t0) * 1000)
        median = statistics.median(offsets)
        gap = "" if previous is None else f"{median - statistics.median(previous):8.1f}"
        lines.append(f"{label:48} {median:11.1f} {gap}")
        previous = offsets
    return "\n".join(lines)


async def _trace(args: argparse.Namespace, root: Path) -> None:
    await asyncio.to_thread(importlib.import_module, "openai_codex")
    await asyncio.to_thread(importlib.import_module, "claude_agent_sdk")
    servers = await ModelServers.start()
    try:
        for product in args.products:
            tracer = Tracer()
            bench: Bench
            if product == "codex":
                bench = CodexBench(servers, root, 1)
            else:
                bench = ClaudeBench(servers, root, 1)
            _product_points(tracer, product)
            dsh_runs: list[Events] = []
            sdk_runs: list[Events] = []
            with _dsh_subprocess_points(tracer):
                for index in range(args.warmup + args.runs):
                    keep = index >= args.warmup
                    events = await _dsh_once(bench, tracer, args.nice)
                    if keep:
                        dsh_runs.append(list(events))
                    await asyncio.sleep(args.settle)
                    if isinstance(bench, CodexBench):
                        events = await _codex_sdk_once(bench, tracer)
                    else:
                        assert isinstance(bench, ClaudeBench)
                        events = await _claude_sdk_once(bench, tracer)
                    if keep:
                        sdk_runs.append(list(events))
                    await asyncio.sleep(args.settle)
            print(_table(f"== {product}: dsh, median of {args.runs} (ms)", dsh_runs))
            print(_table(f"== {product}: official SDK, median of {args.runs} (ms)", sdk_runs))
            print(flush=True)
    finally:
        await servers.aclose()
    OUR_TREES.clear()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--products", default=",".join(PRODUCTS))
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--settle", type=float, default=0.2)
    parser.add_argument(
        "--nice",
        type=lambda text: None if text == "none" else text if text == "auto" else int(text),
        default="auto",
        help="dsh's product niceness (provider config nice; default auto, 'none' to inherit)",
    )
    args = parser.parse_args(argv)
    args.products = tuple(p for p in args.products.split(",") if p)
    if not args.products or any(p not in PRODUCTS for p in args.products) or args.runs < 1:
        parser.error(f"--products takes a comma list of {', '.join(PRODUCTS)}; --runs >= 1")
    root = Path(tempfile.mkdtemp(prefix="dsh-trace-"))
    try:
        asyncio.run(_trace(args, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
