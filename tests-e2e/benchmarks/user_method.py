"""The user method (issue 28): dsh and the official SDKs measured the way a user runs them.

Run: ``uv run python tests-e2e/benchmarks/run.py --method user [--rounds N] [--products ...]
[--nice N|none] [--cpu-settle S]``. The default ``--method paired`` is run.py's own measurement,
unchanged.

One process, against the same loopback model servers as the paired mode (``model_servers.py``,
a separate process). Each round takes, for each product in turn, one delegation per side (dsh, the
official SDK, and for Claude Code the SDK with dsh's activity stream, below), one at a time with
no pause, in an order that rotates from round to round. ``--warmup`` rounds (default 1) come
first and are not recorded. Nothing is reused between delegations:

- dsh: a fresh ``SubagentService`` (``async with``), a fresh provider with its **default
  configuration** plus the env that points the product at the loopback model (the ``testing``
  modules' ``hermetic_env``; ``nice`` only when ``--nice`` is given), registered, then
  ``async with await service.start(name, request) as run:`` around ``run.result()``, then
  ``provider.aclose()`` before the service's exit.
- the Codex SDK: the sync ``openai_codex.Codex`` client in a worker thread (``asyncio.to_thread``):
  ``with Codex(CodexConfig(env, cwd)) as codex: codex.thread_start(cwd=...).run(task)``, default
  arguments otherwise.
- the Claude Agent SDK: ``claude_agent_sdk.query(prompt, options)`` iterated to its end, with
  ``ClaudeAgentOptions(cwd, env)`` only. Its env also names a private ``TMPDIR`` in the
  delegation's directory (dsh gives its product one by default; this keeps the SDK's scratch files
  out of ``/tmp``).
- for Claude Code, a third side, *the SDK with dsh's activity stream*: the same call with
  ``include_partial_messages=True``. dsh asks the CLI for that stream on every run (one
  ``stream_event`` line per model SSE event: the activity the caller's stall limit reads,
  docs/liveness.md); the SDK's default does not, so its default side reads fewer lines. This side
  shows what the stream itself costs, measured in the same rounds.
- a fresh product home per delegation on both sides (Codex: a new ``CODEX_HOME`` written by
  ``write_codex_home``; Claude Code: a new ``HOME`` and ``CLAUDE_CONFIG_DIR``) and a fresh
  workspace. Writing them is outside every figure.

Figures per delegation:

- *end-to-end wall* (``time.perf_counter``): dsh from the call of ``service.start()`` to the end
  of the run's ``async with`` block (its ``aclose()`` returns only after whole-tree exit); the
  Codex SDK around the ``await asyncio.to_thread(...)`` of the whole ``with Codex(...)`` block; the
  Claude SDK from the ``query()`` call to the end of its iteration (the SDK waits for its CLI).
- *parent CPU*: the delta of ``time.process_time()`` (this process, all its threads) around the
  whole delegation: dsh from entering the service to leaving it, the SDKs around the same span as
  their wall time, each then extended by ``--cpu-settle`` seconds (default 1.2) of idle wait, the
  same for both sides. That wait puts work a delegation defers where it belongs: dsh refills its
  standby supervisor 1 s after a spawn, which would otherwise land in the next delegation's
  window, usually the SDK's. The model servers' CPU is in their own process and never counted;
  they are started outside dsh (``run.Helper``), so no scan of theirs runs in this process.

Per product: the medians of each side, the median of per-round ratios dsh / SDK (a round's
delegations see the same machine, which cancels slow drift) and the ratio of medians; the order
of the sides rotates from round to round. After every
dsh delegation the script checks independently that no process carrying the run's tree marker is
left (run.py's ``_verify_gone``; a tree still there after 5 s is killed and reported).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from run import (
    ANSWER,
    CODEX_MODEL,
    OUR_TREES,
    ModelServers,
    _leftover_children,
    _our_leftovers,
    _tree_of,
    _verify_gone,
    _versions,
)

from dsh.subagent import Parent, StopReason, SubagentService, SubagentStartRequest, TextBlock
from dsh.subagent_claude_code import ClaudeCodeProvider, ClaudeCodeProviderConfig
from dsh.subagent_claude_code.testing import hermetic_env as claude_hermetic_env
from dsh.subagent_codex import CodexProvider, CodexProviderConfig
from dsh.subagent_codex.testing import hermetic_env as codex_hermetic_env
from dsh.subagent_codex.testing import write_codex_home

__all__ = ["failed", "run_user"]

TASK = "BENCH-E2E answer please"
Measured = tuple[float, float]  # (end-to-end wall s, parent CPU s)
SIDES = {"codex": ("dsh", "sdk"), "claude-code": ("dsh", "sdk", "sdk_stream")}
"""Each product's sides; ``sdk_stream``: the Claude SDK with dsh's activity stream."""


class _Delegations:
    """One product's two sides, each call with a fresh home, workspace, service and provider."""

    def __init__(
        self,
        product: str,
        servers: ModelServers,
        root: Path,
        overrides: dict[str, Any],
        cpu_settle: float,
    ) -> None:
        self.product = product
        self.servers = servers
        self.root = root
        self.overrides = overrides  # dsh config fields beyond ``env``: ``nice`` when given
        self.cpu_settle = cpu_settle  # seconds after the delegation still counted in its CPU
        self.count = 0
        self.late_exits: list[float] = []

    def _fresh(self, side: str) -> tuple[Path, dict[str, str]]:
        """A new directory for one delegation: its workspace and the env of its new home."""
        self.count += 1
        base = self.root / self.product / f"{side}-{self.count}"
        workspace = base / "ws"
        workspace.mkdir(parents=True)
        if self.product == "codex":
            home = write_codex_home(base / "home", self.servers.codex_url, CODEX_MODEL)
            return workspace, codex_hermetic_env(home)
        return workspace, claude_hermetic_env(base / "home", self.servers.claude_url)

    def _provider(self, env: dict[str, str]) -> CodexProvider | ClaudeCodeProvider:
        fields = {"env": env, **self.overrides}
        if self.product == "codex":
            return CodexProvider(CodexProviderConfig(**fields))
        return ClaudeCodeProvider(ClaudeCodeProviderConfig(**fields))

    async def dsh(self) -> Measured:
        workspace, env = self._fresh("dsh")
        request = SubagentStartRequest(
            prompt=(TextBlock(TASK),), parent=Parent(session_id="dsh-bench", cwd=str(workspace))
        )
        cpu0 = time.process_time()
        async with SubagentService() as service:
            provider = self._provider(env)
            service.register(provider)
            began = time.perf_counter()
            async with await service.start(provider.name, request) as run:
                tree_id = _tree_of(run.inner).tree_id
                OUR_TREES.add(tree_id)
                result = await run.result()
            wall = time.perf_counter() - began
            await provider.aclose()
        await asyncio.sleep(self.cpu_settle)
        cpu = time.process_time() - cpu0
        late = await _verify_gone(tree_id, time.perf_counter())
        if late is not None:
            self.late_exits.append(late)
        if result.stop_reason is not StopReason.COMPLETED or result.text.strip() != ANSWER:
            raise RuntimeError(f"dsh run ended {result.stop_reason}: {result.diagnostic}")
        return wall, cpu

    async def measure(self, side: str) -> Measured:
        if side == "dsh":
            return await self.dsh()
        return await self.sdk(stream=side == "sdk_stream")

    async def sdk(self, *, stream: bool = False) -> Measured:
        workspace, env = self._fresh("sdk")
        if self.product == "codex":
            cpu0 = time.process_time()
            began = time.perf_counter()
            text = await asyncio.to_thread(_codex_sdk, workspace, env)
        else:
            sdk = importlib.import_module("claude_agent_sdk")
            tmp = workspace.parent / "tmp"
            tmp.mkdir()
            env = {**env, "TMPDIR": str(tmp), "CLAUDE_CODE_TMPDIR": str(tmp)}
            options = sdk.ClaudeAgentOptions(
                cwd=str(workspace), env=env, include_partial_messages=stream
            )
            text = ""
            cpu0 = time.process_time()
            began = time.perf_counter()
            async for message in sdk.query(prompt=TASK, options=options):
                if isinstance(message, sdk.ResultMessage):
                    text = str(message.result or "")
        wall = time.perf_counter() - began
        await asyncio.sleep(self.cpu_settle)
        cpu = time.process_time() - cpu0
        if text.strip() != ANSWER:
            raise RuntimeError(f"unexpected SDK answer {text[:80]!r}")
        return wall, cpu


def _codex_sdk(workspace: Path, env: dict[str, str]) -> str:
    """One delegation with the official sync client, as its Quickstart uses it (worker thread)."""
    sdk = importlib.import_module("openai_codex")
    with sdk.Codex(sdk.CodexConfig(env=env, cwd=str(workspace))) as codex:
        result = codex.thread_start(cwd=str(workspace)).run(TASK)
    return str(result.final_response or "")


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def _figures(rounds: list[dict[str, Measured]], sides: tuple[str, ...]) -> dict[str, Any]:
    """Medians per side, and dsh's ratios to each SDK side (``sdk``: the plain key names)."""
    if not rounds:
        return {"n": 0}

    def median(side: str, index: int) -> float:
        return statistics.median(r[side][index] for r in rounds)

    figures: dict[str, Any] = {"n": len(rounds)}
    for side in sides:
        figures[f"{side}_e2e_ms"] = _ms(median(side, 0))
        figures[f"{side}_cpu_ms"] = _ms(median(side, 1))
    for side in sides[1:]:
        suffix = "" if side == "sdk" else f"_to_{side}"
        for index, metric in enumerate(("e2e", "cpu")):
            per_round = [r["dsh"][index] / r[side][index] for r in rounds if r[side][index] > 0]
            of_rounds = statistics.median(per_round)
            of_medians = median("dsh", index) / median(side, index)
            figures[f"{metric}_ratio{suffix}_median_of_rounds"] = round(of_rounds, 3)
            figures[f"{metric}_ratio{suffix}_of_medians"] = round(of_medians, 3)
    # per recorded round, in order: [end-to-end wall, parent CPU]
    figures["samples_ms"] = {
        side: [[_ms(r[side][0]), _ms(r[side][1])] for r in rounds] for side in sides
    }
    return figures


async def _bench(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    # Import cost (≈0.7 s for openai_codex) stays out of every figure.
    await asyncio.to_thread(importlib.import_module, "openai_codex")
    await asyncio.to_thread(importlib.import_module, "claude_agent_sdk")
    load_before = [round(x, 2) for x in os.getloadavg()]
    overrides = {"nice": args.nice} if args.nice_given else {}
    servers = await ModelServers.start()
    sides = {p: _Delegations(p, servers, root, overrides, args.cpu_settle) for p in args.products}
    rounds: dict[str, list[dict[str, Measured]]] = {p: [] for p in args.products}
    errors: dict[str, list[str]] = {p: [] for p in args.products}
    try:
        for round_no in range(args.warmup + args.rounds):
            for product, side in sides.items():
                names = SIDES[product]
                shift = round_no % len(names)  # dsh first on round 0, then each side in turn
                measured: dict[str, Measured] = {}
                try:
                    for name in names[shift:] + names[:shift]:
                        measured[name] = await side.measure(name)
                except Exception as exc:
                    errors[product].append(f"round {round_no}: {exc!r}"[:300])
                    continue
                if round_no >= args.warmup:
                    rounds[product].append(measured)
            print(
                f"round {round_no + 1}/{args.warmup + args.rounds}"
                f"{' (warm-up)' if round_no < args.warmup else ''} done",
                file=sys.stderr,
                flush=True,
            )
    finally:
        await servers.aclose()
    return {
        "meta": {
            "method": "user",
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "rounds": args.rounds,
            "warmup": args.warmup,
            "nice": args.nice if args.nice_given else "default",
            "cpu_settle_s": args.cpu_settle,
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "versions": _versions(),
            "leftover_marked_processes": await asyncio.to_thread(_our_leftovers),
            "leftover_children": await asyncio.to_thread(_leftover_children),
        },
        "products": {
            product: {
                **_figures(rounds[product], SIDES[product]),
                "late_tree_exits": sides[product].late_exits,
                "errors": errors[product],
            }
            for product in args.products
        },
    }


def _print(report: dict[str, Any]) -> None:
    meta = report["meta"]
    print(
        f"dsh vs the official SDKs, the user method — {meta['date']}, {meta['rounds']} rounds "
        f"after {meta['warmup']} warm-up, {meta['cpus']} CPUs, load at start "
        f"{meta['load_before']} (after {meta['load_after']}), dsh nice: {meta['nice']}, "
        f"CPU counted to {meta['cpu_settle_s']} s after each delegation"
    )
    for product, f in report["products"].items():
        problems = f["errors"] + [f"late tree exit {x} s" for x in f["late_tree_exits"]]
        for problem in problems:
            print(f"  {product}: ERROR {problem}")
        if f["n"] == 0:
            continue
        print(
            f"  {product}: end to end dsh {f['dsh_e2e_ms']} ms, SDK {f['sdk_e2e_ms']} ms; "
            f"dsh / SDK median of per-round ratios {f['e2e_ratio_median_of_rounds']}x, "
            f"ratio of medians {f['e2e_ratio_of_medians']}x; n = {f['n']}"
        )
        print(
            f"  {product}: parent CPU dsh {f['dsh_cpu_ms']} ms, SDK {f['sdk_cpu_ms']} ms; "
            f"ratio of medians {f['cpu_ratio_of_medians']}x, "
            f"median of per-round ratios {f['cpu_ratio_median_of_rounds']}x"
        )
        if "sdk_stream_e2e_ms" in f:
            print(
                f"  {product}: against the SDK with dsh's activity stream "
                f"(include_partial_messages): end to end {f['sdk_stream_e2e_ms']} ms, dsh / it "
                f"{f['e2e_ratio_to_sdk_stream_median_of_rounds']}x; parent CPU "
                f"{f['sdk_stream_cpu_ms']} ms, dsh / it "
                f"{f['cpu_ratio_to_sdk_stream_median_of_rounds']}x (median of per-round ratios)"
            )
    if meta["leftover_marked_processes"] or meta["leftover_children"]:
        print(
            f"  LEFTOVERS: marked {meta['leftover_marked_processes']}, "
            f"children {meta['leftover_children']}"
        )


def run_user(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """The ``--method user`` mode of run.py: measure, print, and return the report."""
    report = asyncio.run(_bench(args, root))
    if not args.no_table:
        _print(report)
    return report


def failed(report: dict[str, Any]) -> bool:
    """Whether the report shows an error, a late tree exit or a leftover process."""
    meta = report["meta"]
    return bool(
        meta["leftover_marked_processes"]
        or meta["leftover_children"]
        or any(p["errors"] or p["late_tree_exits"] for p in report["products"].values())
    )
