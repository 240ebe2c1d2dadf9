"""dsh benchmarks: the dsh providers vs the official SDKs vs the raw product CLIs.

Run: ``uv run python tests-e2e/benchmarks/run.py [--runs N] [--quick]``. This is the default
``--method paired``; ``--method user`` measures the way a user runs each side instead (fresh
service, provider and home per delegation, default configs): see ``user_method.py``.

Everything runs in this one process against the same loopback model servers (a separate process,
``model_servers.py``, so their CPU and event-loop work never count against the parent). Each
round runs ``--e2e-per-round`` end-to-end trios (every variant once, back to back, in an order
rotated per trio: A/B/C, B/C/A, C/A/B, ...), then the cancel, concurrency and loop-lag phases.
Figures are medians over all recorded samples; the end-to-end target also uses the median of
per-trio ratios, which cancels the machine's slow drift. A warm-up round (reused homes, imports,
first-run caches) is not recorded. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import datetime
import importlib
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, TypeVar

import psutil
from bench_report import (
    PLAIN,
    PRODUCTS,
    VARIANTS,
    WATCHED,
    CancelSample,
    Product,
    Results,
    Sample,
    print_report,
    summarize,
)
from chart import pairs_of, render
from spawn_cost import spawn_cost_ms

from dsh.subagent import Descriptor, Parent, ResolvedStartRequest, StopReason, TextBlock
from dsh.subagent_claude_code import ClaudeCodeProvider, ClaudeCodeProviderConfig
from dsh.subagent_claude_code.testing import hermetic_env as claude_hermetic_env
from dsh.subagent_codex import CodexProvider, CodexProviderConfig
from dsh.subagent_codex.testing import hermetic_env as codex_hermetic_env
from dsh.subagent_codex.testing import write_codex_home
from dsh.subprocess import (
    KERNEL_LAYER_ENV,
    TREE_MARKER_ENV,
    Collect,
    ManagedProcess,
    SpawnSpec,
    default_runtime,
    kernel_layer,
    marked_processes,
)
from dsh.subprocess import _spawn as spawn_module
from dsh.subprocess.testing import spawner_processes
from dsh.tool_subagent._limits import RunLimits, Watchdog

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE / "results" / "latest.json"
USER_JSON = HERE / "results" / "user-latest.json"  # ``--method user``'s default
ANSWER = "BENCH-OK"
TOOL_MARK = "time.sleep(37)"  # in the argv of the tool process model_servers.py asks for
CODEX_MODEL = "mock-model"
LAG_INTERVAL_S = 0.005
_SDK_THREADS = concurrent.futures.ThreadPoolExecutor(16, thread_name_prefix="codex-sdk")
"""Enough threads for every concurrent sync-SDK run (the default executor has cpus + 4)."""


# ---- small helpers -------------------------------------------------------------------------


def _request(cwd: Path, text: str, provider: str) -> ResolvedStartRequest:
    return ResolvedStartRequest(
        prompt=(TextBlock(text),),
        parent=Parent(session_id="dsh-bench", cwd=str(cwd)),
        descriptor=Descriptor(provider=provider),
    )


def _tree_of(run: object) -> ManagedProcess:
    """The run's ``ManagedProcess`` (private attributes: benchmark-only introspection)."""
    proc = getattr(run, "_proc", None)
    if proc is None:
        proc = getattr(getattr(run, "_transport", None), "process", None)
    if not isinstance(proc, ManagedProcess):
        raise RuntimeError("cannot find the run's process tree")
    return proc


def _is_tool(pid: int) -> bool:
    try:
        cmdline = psutil.Process(pid).cmdline()
    except psutil.Error:
        return False
    return (
        bool(cmdline)
        and Path(cmdline[0]).name.startswith("python")
        and any(TOOL_MARK in part for part in cmdline[1:])
    )


def _find_tool(tree_id: str, root: int) -> int | None:
    candidates = set(marked_processes(tree_id))
    with contextlib.suppress(psutil.Error):
        candidates.update(p.pid for p in psutil.Process(root).children(recursive=True))
    return next((pid for pid in sorted(candidates) if _is_tool(pid)), None)


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


OUR_TREES: set[str] = set()
"""Every tree id this benchmark created (the machine may run other dsh processes meanwhile)."""


T = TypeVar("T")


async def answered_then_closed(
    answer: Awaitable[T], close: Callable[[], Awaitable[None]]
) -> tuple[T, float]:
    """What ``answer`` returned and when (``time.perf_counter()``); ``close`` runs either way."""
    try:
        value = await answer
        return value, time.perf_counter()
    finally:
        await close()


def _marker_of(pid: int) -> str | None:
    try:
        value = psutil.Process(pid).environ().get(TREE_MARKER_ENV)
    except psutil.Error:
        return None
    return value if isinstance(value, str) else None


def _our_leftovers() -> list[int]:
    return [pid for pid in marked_processes() if _marker_of(pid) in OUR_TREES]


def _leftover_children() -> list[int]:
    """This process's live descendants, less dsh.subprocess's own spawner machinery."""
    infrastructure = set(spawner_processes(os.getpid()))
    return [
        p.pid
        for p in psutil.Process().children(recursive=True)
        if _alive(p.pid) and p.pid not in infrastructure
    ]


def _leftovers(tree_id: str, extra: tuple[int, ...] = ()) -> list[int]:
    return sorted(set(marked_processes(tree_id)) | {p for p in extra if _alive(p)})


async def _verify_gone(tree_id: str, began: float, extra: tuple[int, ...] = ()) -> float | None:
    """None when nothing of the tree is left now; else the time (from ``began``) it took to go.

    The figures come from the API's own return (``aclose()`` claims whole-tree exit); this is an
    independent check that the claim held. A tree still alive after 5 s is killed and reported.
    """
    left = await asyncio.to_thread(_leftovers, tree_id, extra)
    if not left:
        return None
    deadline = time.monotonic() + 5.0
    while left and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
        left = await asyncio.to_thread(_leftovers, tree_id, extra)
    gone_after = time.perf_counter() - began
    for pid in left:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    return gone_after if not left else math.inf


# ---- the model servers ---------------------------------------------------------------------


class Helper:
    """A helper program of the benchmark's own (model servers, lag probe), started outside dsh.

    On purpose: a dsh-supervised tree is scanned once a second on this process's CPU, so a
    supervised helper would add about a millisecond to whichever delegation is being measured,
    on either side, and blur the ratios. A helper has no descendants; ``aclose`` kills and reaps
    it.
    """

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self.stdin = proc.stdin
        self.stdout = proc.stdout

    async def wait(self) -> int:
        return await self._proc.wait()

    async def aclose(self) -> None:
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
        await self._proc.wait()


async def _start_helper(script: str) -> tuple[Helper, bytes]:
    """Start a helper program next to this script; return it with its first stdout line."""
    # Not through dsh.subprocess: see Helper.
    proc = await asyncio.create_subprocess_exec(  # noqa: TID251
        sys.executable,
        "-I",
        str(HERE / script),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    helper = Helper(proc)
    try:
        assert helper.stdout is not None
        async with asyncio.timeout(30):
            return helper, await helper.stdout.readline()
    except BaseException:
        await helper.aclose()
        raise


class ModelServers:
    """``model_servers.py`` as a child process, with its one-line control protocol."""

    def __init__(self, proc: Helper, urls: dict[str, str]) -> None:
        self.proc = proc
        self.codex_url = urls["codex"]
        self.claude_url = urls["claude"]
        self._lock = asyncio.Lock()

    @classmethod
    async def start(cls) -> ModelServers:
        proc, line = await _start_helper("model_servers.py")
        return cls(proc, json.loads(line))

    async def command(self, line: str, timeout: float = 10.0) -> str:  # noqa: ASYNC109
        async with self._lock:
            assert self.proc.stdin is not None
            assert self.proc.stdout is not None
            self.proc.stdin.write(line.encode() + b"\n")
            await self.proc.stdin.drain()
            async with asyncio.timeout(timeout):
                return (await self.proc.stdout.readline()).decode().strip()

    async def wait_seen(self, token: str) -> None:
        """Until a model request carrying ``token`` has reached the server (bounded there)."""
        if await self.command(f"wait {token}", timeout=40.0) != "yes":
            raise RuntimeError("the model request never arrived")

    async def aclose(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await self.proc.wait()
        await self.proc.aclose()


class LagProbe:
    """``lag_probe.py``: an idle sibling process whose loop lag is the machine's floor."""

    def __init__(self, proc: Helper) -> None:
        self.proc = proc

    @classmethod
    async def start(cls) -> LagProbe:
        proc, line = await _start_helper("lag_probe.py")
        if line.strip() != b"ready":
            await proc.aclose()
            raise RuntimeError("the lag probe did not start")
        return cls(proc)

    async def stop(self) -> list[float]:
        """Stop ticking and return the probe's lag samples."""
        try:
            assert self.proc.stdin is not None
            assert self.proc.stdout is not None
            self.proc.stdin.close()
            async with asyncio.timeout(10):
                line = await self.proc.stdout.readline()
            return [float(x) for x in json.loads(line)]
        finally:
            await self.proc.aclose()


async def _timed(body: Callable[[], Awaitable[tuple[str, float]]]) -> Sample:
    cpu0 = time.process_time()
    began = time.perf_counter()
    text, answered = await body()
    total = time.perf_counter() - began
    cpu = time.process_time() - cpu0
    if text.strip() != ANSWER:
        raise RuntimeError(f"unexpected answer {text[:80]!r}")
    return Sample(answered - began, total, cpu)


# ---- the products --------------------------------------------------------------------------


class Bench:
    """One product's variants: the dsh provider, the official SDK and the raw CLI."""

    product: Product

    def __init__(
        self,
        servers: ModelServers,
        root: Path,
        concurrency: int,
        settle_s: float = 0.0,
        e2e_per_round: int = 1,
        nice: int | Literal["auto"] | None = "auto",
    ) -> None:
        self.servers = servers
        self.nice = nice  # dsh's provider config ``nice`` ("auto" is the default)
        self.root = root
        self.concurrency = concurrency
        self.e2e_per_round = e2e_per_round
        self.settle_s = (
            settle_s  # a pause before each measurement, so one's exit can't slow the next
        )

    def _dir(self, *parts: str) -> Path:
        path = self.root.joinpath(self.product, *parts)
        path.mkdir(parents=True, exist_ok=True)
        return path

    # -- per product --
    def dsh_provider(self, slot: str, *, tool: bool = False) -> CodexProvider | ClaudeCodeProvider:
        raise NotImplementedError

    async def sdk_once(self, task: str, slot: str = "sdk") -> tuple[str, float]:
        raise NotImplementedError

    def cli_argv(self, task: str) -> tuple[list[str], dict[str, str | None], Path]:
        raise NotImplementedError

    async def prepare_cancel(self, token: str, tool: bool) -> None:
        """Script the model for a cancel run (Codex routes by task text; nothing to do)."""

    # -- shared --
    async def dsh_once(
        self, slot: str, *, supervised: bool = True, watched: bool = False
    ) -> Sample:
        """One dsh run; ``watched`` arms the caller's watchdog as the delegation tool does
        (``stall_timeout_s`` at its default and a wall clock of an hour: both timers)."""
        provider = self.dsh_provider(slot)
        request = _request(self._dir("ws", slot), "BENCH-E2E answer please", self.product)
        close_s = 0.0
        tree_id = ""

        async def body() -> tuple[str, float]:
            nonlocal close_s, tree_id
            # The fallback path, for the A/B (runs are sequential here, so the switch is ours).
            was = spawn_module._SUPERVISED
            spawn_module._SUPERVISED = was and supervised
            try:
                run = await provider.start(request)
            finally:
                spawn_module._SUPERVISED = was
            tree_id = _tree_of(run).tree_id
            OUR_TREES.add(tree_id)
            watchdog = None
            if watched:
                loop_time = asyncio.get_running_loop().time()
                watchdog = Watchdog(run, RunLimits(timeout_s=3600.0), loop_time)
            try:
                result = await run.result()
                answered = time.perf_counter()
            finally:
                if watchdog is not None:
                    watchdog.stop()
                closing = time.perf_counter()
                await run.aclose()
                close_s = time.perf_counter() - closing
            if result.stop_reason is not StopReason.COMPLETED:
                raise RuntimeError(f"dsh run ended {result.stop_reason}: {result.diagnostic}")
            return result.text, answered

        sample = await _timed(body)
        sample.close_s = close_s
        sample.late_exit_s = await _verify_gone(tree_id, time.perf_counter())
        return sample

    async def cli_once(self) -> Sample:
        argv, env, cwd = self.cli_argv("BENCH-E2E answer please")

        async def body() -> tuple[str, float]:
            spec = SpawnSpec(
                argv=argv,
                cwd=str(cwd),
                env=env,
                stdin="ignore",
                stdout=Collect(1 << 20),
                stderr=Collect(1 << 16),
            )
            proc = await default_runtime().spawn(spec)
            OUR_TREES.add(proc.tree_id)
            outcome, answered = await answered_then_closed(proc.wait(), proc.aclose)
            text = proc.collected("stdout").text
            if outcome.exit_code != 0:
                raise RuntimeError(f"raw CLI exited {outcome}")
            return text, answered

        return await _timed(body)

    async def sdk_sample(self) -> Sample:
        return await _timed(lambda: self.sdk_once("BENCH-E2E answer please"))

    async def cancel_once(self, *, tool: bool) -> CancelSample:
        token = f"BENCH-{'TOOL' if tool else 'STALL'}-{uuid.uuid4().hex[:12]}"
        await self.prepare_cancel(token, tool)
        provider = self.dsh_provider("cancel-tool" if tool else "cancel", tool=tool)
        run = await provider.start(_request(self._dir("ws", "cancel"), token, self.product))
        proc = _tree_of(run)
        OUR_TREES.add(proc.tree_id)
        tool_pid: tuple[int, ...] = ()
        try:
            if tool:
                async with asyncio.timeout(60):
                    while True:
                        pid = await asyncio.to_thread(_find_tool, proc.tree_id, proc.pid)
                        if pid is not None:
                            tool_pid = (pid,)
                            break
                        await asyncio.sleep(0.02)
            else:
                await self.servers.wait_seen(token)
            began = time.perf_counter()
            run.cancel()
            result = await run.result()
            settled = time.perf_counter()
            await run.aclose()
            closed = time.perf_counter()
        finally:
            await run.aclose()
        if result.stop_reason is not StopReason.ABORTED:
            raise RuntimeError(f"cancelled run ended {result.stop_reason}")
        late = await _verify_gone(proc.tree_id, began, tool_pid)
        return CancelSample(settled - began, closed - began, late)

    async def sdk_concurrent(self, n: int) -> float:
        """``n`` official-SDK runs at once (each with its own home), for the lag comparison."""
        began = time.perf_counter()
        async with asyncio.TaskGroup() as group:
            for index in range(n):
                group.create_task(self.sdk_once("BENCH-E2E answer please", f"sdk{index}"))
        return time.perf_counter() - began

    async def concurrent(self, n: int) -> float:
        began = time.perf_counter()
        async with asyncio.TaskGroup() as group:
            for index in range(n):
                group.create_task(self.dsh_once(f"slot{index}"))
        return time.perf_counter() - began


class CodexBench(Bench):
    product: Product = "codex"

    def _home(self, slot: str) -> Path:
        home = self.root / self.product / "homes" / slot
        if not (home / "config.toml").exists():
            write_codex_home(home, self.servers.codex_url, CODEX_MODEL)
        return home

    def dsh_provider(self, slot: str, *, tool: bool = False) -> CodexProvider:
        mode = "dangerously-bypass-approvals-and-sandbox" if tool else "never"
        config = CodexProviderConfig(
            env=codex_hermetic_env(self._home(slot)),
            permission_mode=mode,
            stderr="discard",
            nice=self.nice,
        )
        return CodexProvider(config)

    async def sdk_once(self, task: str, slot: str = "sdk") -> tuple[str, float]:
        # As the SDK's Quickstart uses it: the sync ``Codex`` client, ``thread_start()`` and
        # ``Thread.run()``, here in a worker thread. It was faster than ``AsyncCodex``, which
        # hops to a thread for every call (docs/performance.md).
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_SDK_THREADS, self._sdk_sync, task, slot)

    def _sdk_sync(self, task: str, slot: str) -> tuple[str, float]:
        sdk = importlib.import_module("openai_codex")
        workspace = self._dir("ws", slot)
        config = sdk.CodexConfig(env=codex_hermetic_env(self._home(slot)), cwd=str(workspace))
        with sdk.Codex(config) as codex:
            thread = codex.thread_start(
                approval_mode=sdk.ApprovalMode.deny_all, ephemeral=True, cwd=str(workspace)
            )
            result = thread.run(task)
            answered = time.perf_counter()
        return str(result.final_response or ""), answered

    def cli_argv(self, task: str) -> tuple[list[str], dict[str, str | None], Path]:
        import codex_cli_bin

        workspace = self._dir("ws", "cli")
        env: dict[str, str | None] = dict(codex_hermetic_env(self._home("cli")))
        path_dir = codex_cli_bin.bundled_path_dir()
        if path_dir is not None:
            env["PATH"] = f"{path_dir}{os.pathsep}{os.environ.get('PATH', '')}"
        argv = [
            str(codex_cli_bin.bundled_codex_path()),
            "exec",
            "--skip-git-repo-check",
            "--ephemeral",
            "--color",
            "never",
            "-c",
            'approval_policy="never"',
            "-C",
            str(workspace),
            task,
        ]
        return argv, env, workspace


class ClaudeBench(Bench):
    product: Product = "claude-code"

    def _env(self, slot: str) -> dict[str, str]:
        return claude_hermetic_env(
            self.root / self.product / "homes" / slot, self.servers.claude_url
        )

    def _peer_env(self, slot: str) -> dict[str, str]:
        # The peers get a private TMPDIR too, so their fswatch probes stay in our temp root.
        tmp = self._dir("tmp", slot)
        return {**self._env(slot), "TMPDIR": str(tmp), "CLAUDE_CODE_TMPDIR": str(tmp)}

    def dsh_provider(self, slot: str, *, tool: bool = False) -> ClaudeCodeProvider:
        env = self._env(slot)
        if tool:
            env["IS_SANDBOX"] = "1"  # bypassPermissions as root needs it
        config = ClaudeCodeProviderConfig(
            env=env,
            permission_mode="bypassPermissions" if tool else "dontAsk",
            stderr="discard",
            nice=self.nice,
        )
        return ClaudeCodeProvider(config)

    async def prepare_cancel(self, token: str, tool: bool) -> None:
        reply = await self.servers.command(f"{'claude-tool' if tool else 'claude-stall'} {token}")
        if reply != "ok":
            raise RuntimeError("the model server refused a control line")

    def sdk_options(self, slot: str) -> Any:
        """The official SDK's options for one run (the same product configuration as dsh's)."""
        sdk = importlib.import_module("claude_agent_sdk")
        return sdk.ClaudeAgentOptions(
            cwd=str(self._dir("ws", slot)),
            env=self._peer_env(slot),
            permission_mode="dontAsk",
            disallowed_tools=["AskUserQuestion"],
            extra_args={"no-session-persistence": None},
            # The same product configuration as dsh and the raw CLI: Claude Code's own system
            # prompt (the SDK's default would pass ``--system-prompt ""`` instead).
            system_prompt={"type": "preset", "preset": "claude_code"},
        )

    async def sdk_once(self, task: str, slot: str = "sdk") -> tuple[str, float]:
        sdk = importlib.import_module("claude_agent_sdk")
        text, answered = "", 0.0
        async for message in sdk.query(prompt=task, options=self.sdk_options(slot)):
            if isinstance(message, sdk.ResultMessage):
                text, answered = str(message.result or ""), time.perf_counter()
        return text, answered

    def cli_argv(self, task: str) -> tuple[list[str], dict[str, str | None], Path]:
        cli = Path(importlib.import_module("claude_agent_sdk").__file__ or "").parent
        argv = [
            str(cli / "_bundled" / "claude"),
            "-p",
            task,
            "--output-format",
            "text",
            "--permission-mode",
            "dontAsk",
            "--disallowedTools",
            "AskUserQuestion",
            "--no-session-persistence",
        ]
        env: dict[str, str | None] = dict(self._peer_env("cli"))
        return argv, env, self._dir("ws", "cli")


# ---- event-loop lag ------------------------------------------------------------------------


async def _ticker(samples: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        began = time.perf_counter()
        await asyncio.sleep(LAG_INTERVAL_S)
        samples.append(max(0.0, time.perf_counter() - began - LAG_INTERVAL_S))


async def _with_lag(body: Awaitable[float], samples: list[float]) -> float:
    stop = asyncio.Event()
    async with asyncio.TaskGroup() as group:
        ticker = group.create_task(_ticker(samples, stop))
        try:
            return await body
        finally:
            stop.set()
            await ticker


# ---- the rounds ----------------------------------------------------------------------------


async def _round(
    bench: Bench, results: Results, round_no: int, variants: tuple[str, ...], record: bool
) -> None:
    shift = round_no % len(variants)
    order = variants[shift:] + variants[:shift]
    runners: dict[str, Callable[[], Awaitable[Sample]]] = {
        "dsh": lambda: bench.dsh_once("e2e"),
        PLAIN: lambda: bench.dsh_once("e2e-plain", supervised=False),
        WATCHED: lambda: bench.dsh_once("e2e-watched", watched=True),
        "sdk": bench.sdk_sample,
        "cli": bench.cli_once,
    }
    for repeat in range(bench.e2e_per_round):
        # One trio: every variant back to back, so a trio's ratios see the same machine. It is
        # recorded whole or not at all, which keeps the variants' sample lists paired.
        trio: dict[str, Sample] = {}
        for variant in order[repeat % len(order) :] + order[: repeat % len(order)]:
            await asyncio.sleep(bench.settle_s)
            trio[variant] = await runners[variant]()
        if record:
            for variant, sample in trio.items():
                results.e2e[variant].append(sample)
    await asyncio.sleep(bench.settle_s)
    idle = await bench.cancel_once(tool=False)
    await asyncio.sleep(bench.settle_s)
    tool = await bench.cancel_once(tool=True)
    await asyncio.sleep(bench.settle_s)
    single = await bench.concurrent(1)
    await asyncio.sleep(bench.settle_s)
    lag: list[float] = []
    probe = await LagProbe.start()
    try:
        multi = await _with_lag(bench.concurrent(bench.concurrency), lag)
    finally:
        floor = await probe.stop()
    if "sdk" in variants:
        await asyncio.sleep(bench.settle_s)
        sdk_lag: list[float] = []
        probe = await LagProbe.start()  # the same sibling, so both phases carry its cost
        try:
            sdk_multi = await _with_lag(bench.sdk_concurrent(bench.concurrency), sdk_lag)
        finally:
            sdk_floor = await probe.stop()
        if record:
            results.sdk_multi_wall.append(sdk_multi)
            results.sdk_lag.extend(sdk_lag)
            results.sdk_floor_lag.extend(sdk_floor)
    if record:
        results.cancel_idle.append(idle)
        results.cancel_tool.append(tool)
        results.single_wall.append(single)
        results.multi_wall.append(multi)
        results.lag.extend(lag)
        results.floor_lag.extend(floor)


# ---- main ----------------------------------------------------------------------------------


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _versions() -> dict[str, str | None]:
    """The installed versions of dsh's providers and of the peers, for a report's meta."""
    dists = (
        "dsh-subagent-codex",
        "dsh-subagent-claude-code",
        "openai-codex-cli-bin",
        "openai-codex",
        "claude-agent-sdk",
    )
    return {dist: _version(dist) for dist in dists}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument(
        "--method",
        choices=("paired", "user"),
        default="paired",
        help="paired: this script's trios (the default); user: dsh and the official SDKs as a"
        " user runs them, fresh service, provider and home per delegation (user_method.py)",
    )
    parser.add_argument("--runs", type=int, default=10, help="recorded rounds (default 10)")
    parser.add_argument(
        "--rounds", type=int, default=30, help="--method user: recorded rounds (default 30)"
    )
    parser.add_argument(
        "--cpu-settle",
        type=float,
        default=1.2,
        help="--method user: idle seconds after each delegation still counted in its parent CPU,"
        " so deferred work (dsh's standby refill, 1 s after a spawn) counts where it belongs"
        " (default 1.2; 0 for the bare window)",
    )
    parser.add_argument("--warmup", type=int, default=1, help="unrecorded rounds first")
    parser.add_argument("--concurrency", type=int, default=8, help="runs in flight (default 8)")
    parser.add_argument(
        "--e2e-per-round",
        type=int,
        default=5,
        help="end-to-end trios (every variant once) per round (default 5)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke: 1 round, no warm-up, concurrency 2"
    )
    parser.add_argument(
        "--products", default=",".join(PRODUCTS), help="comma list of codex,claude-code"
    )
    parser.add_argument(
        "--no-peers",
        action="store_true",
        help="skip the official SDKs (imports no peer SDK); the raw CLIs still run",
    )
    parser.add_argument(
        "--settle", type=float, default=0.2, help="pause (s) before each measurement"
    )
    parser.add_argument(
        "--plain-spawn",
        action="store_true",
        help="spawn dsh's products without supervisors (the fallback path), to measure their cost",
    )
    parser.add_argument(
        "--ab-plain",
        action="store_true",
        help="add dsh without supervisors as a fourth variant of every trio (paired A/B)",
    )
    parser.add_argument(
        "--ab-watchdog",
        action="store_true",
        help="add dsh with the limits' watchdog armed as another variant of every trio (paired"
        " A/B: the watchdog's parent CPU per run)",
    )
    parser.add_argument(
        "--prewarm",
        nargs="?",
        type=int,
        const=1,
        default=0,
        metavar="N",
        help="only the warm-start measurement (prewarm.py) with prewarm = N (default 1)",
    )
    parser.add_argument(
        "--nice",
        type=lambda text: None if text == "none" else text if text == "auto" else int(text),
        default=argparse.SUPPRESS,
        help="dsh's product niceness (provider config nice; default: the provider's default,"
        " auto; 'none' to inherit)",
    )
    parser.add_argument(
        "--kernel-layer",
        choices=("on", "off"),
        default="on",
        help="off: dsh's runs without the kernel layer (DSH_KERNEL_LAYER=off), to measure its cost",
    )
    parser.add_argument(
        "--json",
        type=Path,
        help=f"where to write JSON (default results/{DEFAULT_JSON.name},"
        f" --method user results/{USER_JSON.name})",
    )
    parser.add_argument("--no-table", action="store_true", help="write JSON only")
    parser.add_argument(
        "--svg",
        type=Path,
        help="also draw this run's end-to-end medians, dsh vs the SDK, as an SVG chart (chart.py):"
        " cold bars from a main run, warm bars from a --prewarm run",
    )
    parser.add_argument("--ray", action="store_true", help="then run ray_executor.py's benchmark")
    args = parser.parse_args(argv)
    args.nice_given = hasattr(args, "nice")
    if not args.nice_given:
        args.nice = "auto"  # the providers' default
    if args.json is None:
        args.json = USER_JSON if args.method == "user" else DEFAULT_JSON
    if args.method == "user" and (args.no_peers or args.prewarm):
        parser.error("--method user compares dsh with the official SDKs: no --no-peers, --prewarm")
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if not 0 <= args.cpu_settle <= 10:
        parser.error("--cpu-settle must be from 0 to 10 seconds")
    if args.quick:
        args.runs, args.warmup, args.concurrency, args.e2e_per_round = 1, 0, 2, 1
        args.rounds = 1
    products = tuple(p for p in args.products.split(",") if p)
    if not products or any(p not in PRODUCTS for p in products):
        parser.error(f"--products takes a comma list of {', '.join(PRODUCTS)}")
    if args.runs < 1 or args.warmup < 0 or args.concurrency < 1 or args.e2e_per_round < 1:
        parser.error("--runs, --concurrency and --e2e-per-round must be >= 1, --warmup >= 0")
    args.products = products
    return args


async def _bench(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    variants: tuple[str, ...] = ("dsh", "cli") if args.no_peers else VARIANTS
    if args.ab_plain:
        variants = (*variants, PLAIN)
    if args.ab_watchdog:
        variants = (*variants, WATCHED)
    if not args.no_peers:
        # Import cost (≈0.7 s for openai_codex) stays out of every timing.
        await asyncio.to_thread(importlib.import_module, "openai_codex")
        await asyncio.to_thread(importlib.import_module, "claude_agent_sdk")
    load_before = [round(x, 2) for x in os.getloadavg()]
    spawn_cost = await spawn_cost_ms()
    if args.kernel_layer == "off":
        os.environ[KERNEL_LAYER_ENV] = "off"  # read by every later spawn in this process
    if args.plain_spawn:
        spawn_module._SUPERVISED = False
    servers = await ModelServers.start()
    benches: dict[Product, Bench] = {}
    results: dict[Product, Results] = {}
    try:
        for product in args.products:
            cls = CodexBench if product == "codex" else ClaudeBench
            benches[product] = cls(
                servers, root, args.concurrency, args.settle, args.e2e_per_round, args.nice
            )
            results[product] = Results()
        for round_no in range(args.warmup + args.runs):
            record = round_no >= args.warmup
            for product, bench in benches.items():
                try:
                    await _round(bench, results[product], round_no, variants, record)
                except Exception as exc:
                    results[product].errors.append(f"round {round_no}: {exc!r}"[:300])
            print(
                f"round {round_no + 1}/{args.warmup + args.runs}"
                f"{'' if record else ' (warm-up)'} done",
                file=sys.stderr,
                flush=True,
            )
    finally:
        await servers.aclose()
    leftovers = await asyncio.to_thread(_our_leftovers)
    children = await asyncio.to_thread(_leftover_children)
    return {
        "meta": {
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "runs": args.runs,
            "warmup": args.warmup,
            "concurrency": args.concurrency,
            "e2e_per_round": args.e2e_per_round,
            "settle_s": args.settle,
            "nice": args.nice,
            "variants": list(variants),
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(),
            "platform": platform.platform(),
            "versions": _versions(),
            "spawn_cost_ms": spawn_cost,
            "supervised": not args.plain_spawn,
            "kernel_layer": kernel_layer().describe()[0],
            "leftover_marked_processes": leftovers,
            "leftover_children": children,
        },
        "products": {
            product: summarize(product, results[product], args.concurrency)
            for product in args.products
        },
    }


def _write_svg(path: Path | None, report: dict[str, Any]) -> None:
    """Draw the report's medians to ``path``; say so, or why nothing was drawn."""
    if path is None:
        return
    pairs = pairs_of(report)
    if not pairs:
        print(f"no chart: no product has both dsh and SDK figures ({path})", file=sys.stderr)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(pairs), encoding="utf-8")
    print(f"chart written to {path}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    root = Path(tempfile.mkdtemp(prefix="dsh-bench-"))
    try:
        if args.prewarm:
            from prewarm import run_prewarm

            report = run_prewarm(args, root)
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
            _write_svg(args.svg, report)
            return 1 if any("error" in p for p in report["products"].values()) else 0
        if args.method == "user":
            import user_method

            report = user_method.run_user(args, root)
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
            print(f"JSON written to {args.json}", file=sys.stderr)
            return 1 if user_method.failed(report) else 0
        report = asyncio.run(_bench(args, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    if not args.no_table:
        print_report(report)
    print(f"JSON written to {args.json}", file=sys.stderr)
    _write_svg(args.svg, report)
    meta = report["meta"]
    failed = (
        meta["leftover_marked_processes"]
        or meta["leftover_children"]
        or any(s["errors"] or s["late_tree_exits"] for s in report["products"].values())
    )
    if args.ray:  # the Ray executor vs the local one; imported only when asked (it imports Ray)
        failed = importlib.import_module("ray_executor").main([]) != 0 or failed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
