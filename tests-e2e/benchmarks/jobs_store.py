"""The durable job store's costs: CPU per job, read latency at 10,000 records, and a soak.

Run: ``uv run python tests-e2e/benchmarks/jobs_store.py [--quick] [--no-soak] [--json OUT]``.

1. **Store cost per job** (no product): a :class:`~dsh.jobs.JobRegistry` over the
   ``MemoryJobStore`` and over the ``SqliteJobStore`` (a fresh temporary file per run) starts
   ``--jobs`` jobs whose work returns a :class:`~dsh.jobs.JobOutcome` at once (a ~200-character
   output and a usage/timings ``meta``), ``--batch`` at a time, each batch awaited with
   ``registry.wait``, then ``aclose()`` (which makes every queued write durable). The figure is
   the process CPU (``time.process_time``: every thread of this process, so the SQLite writer
   thread's work counts too) and the wall time, per job; the two stores take turns over
   ``--rounds`` rounds (order alternating) after an unrecorded warm-up, and each reports its
   median. It is measured twice: at the default retention (1,000 finished records, what ships)
   and with the retention above the job count (the stores' own write cost, without pruning).
   Then, with 10,000 finished records of one owner in a SQLite store: ``job_list``
   (``JobListTool.call``) and ``dsh jobs list --json``'s first page (``newest`` 20, ``correct``,
   ``count``), each the median of ``--reads`` calls, against the targets (PASS/MISS, printed
   only), and the file's size after pruning to the default retention plus ``vacuum()``.
2. **``dsh mcp`` soak** (the real products, loopback models in this process): one ``dsh mcp``
   connection runs ``--soak-jobs`` background delegations, 4 at a time, Codex and Claude Code
   alternating, each started with ``run_in_background: true`` and collected with ``job_output``
   ``wait: true``. After every ``--sample-every`` jobs (the server idle) it samples the server's
   RSS and open fds and the length of ``job_list``'s text. The target: RSS and fds flat after
   the first sample, ``job_list`` bounded (the in-memory registry grew about 7.5 KB and 45
   characters per job).

Timing targets are printed, never asserted (the machine is shared). Every wait is bounded; the
server, the products and the model servers are all gone when the script returns (checked).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import secrets
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import psutil
from mcp import ClientSession, StdioServerParameters, stdio_client, types

from dsh.jobs import (
    JobOutcome,
    JobRecord,
    JobRegistry,
    JobsConfig,
    JobStatus,
    JobStore,
    MemoryJobStore,
    RecordFilter,
    SqliteJobStore,
    this_process,
)
from dsh.jobs.tools import JobListTool
from dsh.subagent_claude_code.testing import Behaviour as ClaudeReply
from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.subagent_codex.testing import (
    FakeResponsesServer,
    MessageItem,
    Reply,
    write_codex_home,
)
from dsh.subagent_codex.testing import hermetic_env as codex_env
from dsh.subprocess.testing import processes_naming

DSH = Path(sys.executable).with_name("dsh")
SIDES = ("memory", "sqlite")
COST_PARTS = ("store_cost", "store_cost_no_prune")
TOOLS = ("subagent_codex", "subagent_claude_code")
ANSWERS = {"subagent_codex": "codex BENCH-OK", "subagent_claude_code": "claude BENCH-OK"}
OWNER = "bench-owner"
#: A delegation's answer as a job keeps it (about 200 characters).
OUTPUT = (
    "The build passes on the branch: 412 tests ran, none failed. The flaky network test was "
    "skipped as configured. I changed two files (src/app/cache.py, tests/test_cache.py) and "
    "left a note in the PR."
)
#: A delegation's host-only facts, as ``JobOutcome.meta`` carries them.
META: dict[str, Any] = {
    "usage": {
        "input_tokens": 18234,
        "cached_input_tokens": 12288,
        "output_tokens": 512,
        "reasoning_output_tokens": 128,
        "total_tokens": 18746,
        "model_requests": 3,
    },
    "timings": {"started_s": 0.41, "first_activity_s": 0.57, "answer_s": 6.93, "tree_exit_s": 7.02},
}
LIST_RECORDS = 10_000
DEFAULT_RETENTION = 1000
JOB_LIST_TARGET_MS = 20.0
FIRST_PAGE_TARGET_MS = 100.0
SOAK_CONCURRENCY = 4
#: Bounds of the soak's waits.
INIT_TIMEOUT_S = 60.0
CALL_TIMEOUT_S = 150.0
JOB_WAIT_MS = 120_000
EXIT_TIMEOUT_S = 15.0
#: The soak stops early after this many failed jobs (the figures would mean nothing).
MAX_FAILURES = 20


@dataclass(frozen=True, slots=True)
class _Owner:
    session_id: str


# ---- 1. store cost per job ------------------------------------------------------------------


async def _work() -> JobOutcome:
    return JobOutcome(JobStatus.COMPLETED, output=OUTPUT, meta=META)


def _store(side: str, root: Path, retention: int) -> JobStore:
    if side == "memory":
        return MemoryJobStore(retention_count=retention)
    store = SqliteJobStore(root / f"cost-{secrets.token_hex(4)}.sqlite3", retention_count=retention)
    store.flush(30.0)  # the prune queued at open is not part of the figure
    return store


def _discard(store: JobStore) -> None:
    if store.path is not None:
        for suffix in ("", "-wal", "-shm"):
            Path(store.path + suffix).unlink(missing_ok=True)


async def _store_run(
    side: str, root: Path, jobs: int, batch: int, retention: int
) -> dict[str, Any]:
    """One run: ``jobs`` jobs through a registry over a fresh store; CPU and wall per job (µs)."""
    store = _store(side, root, retention)
    registry = JobRegistry(JobsConfig(max_concurrent_jobs_per_owner=batch), store=store)
    owner = _Owner(OWNER)
    failed = 0
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    async with asyncio.timeout(300):
        for first in range(0, jobs, batch):
            ids = [
                registry.start("subagent", f"bench job {n}", owner, _work)
                for n in range(first, min(first + batch, jobs))
            ]
            for job_id in ids:
                snapshot = await registry.wait(job_id, 30.0, owner)
                failed += snapshot.status is not JobStatus.COMPLETED
        await registry.aclose()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    _discard(store)
    return {"cpu_us": cpu / jobs * 1e6, "wall_us": wall / jobs * 1e6, "failed": failed}


async def store_cost(
    root: Path, jobs: int, batch: int, rounds: int, retention: int
) -> dict[str, Any]:
    """The two stores taking turns; medians per side, the ratio and the difference."""
    for side in SIDES:  # warm-up: imports, first connections, allocator
        await _store_run(side, root, min(jobs, 200), batch, retention)
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    for index in range(rounds):
        order = SIDES if index % 2 == 0 else SIDES[::-1]
        for side in order:
            runs[side].append(await _store_run(side, root, jobs, batch, retention))
    out: dict[str, Any] = {"jobs": jobs, "batch": batch, "rounds": rounds, "retention": retention}
    for side in SIDES:
        out[side] = {
            "cpu_us_per_job": statistics.median(r["cpu_us"] for r in runs[side]),
            "wall_us_per_job": statistics.median(r["wall_us"] for r in runs[side]),
            "cpu_us_runs": [round(r["cpu_us"], 1) for r in runs[side]],
            "failed": sum(r["failed"] for r in runs[side]),
        }
    memory, sqlite = out["memory"]["cpu_us_per_job"], out["sqlite"]["cpu_us_per_job"]
    out["cpu_ratio_sqlite_vs_memory"] = sqlite / memory
    out["cpu_extra_us_per_job"] = sqlite - memory
    out["wall_extra_us_per_job"] = (
        out["sqlite"]["wall_us_per_job"] - out["memory"]["wall_us_per_job"]
    )
    return out


# ---- 1b. reads at 10,000 records, size after pruning ---------------------------------------


def _file_bytes(path: Path) -> tuple[int, int]:
    """The database file's size and its write-ahead log's (0 when there is none)."""
    wal = Path(f"{path}-wal")
    return (
        path.stat().st_size if path.exists() else 0,
        wal.stat().st_size if wal.exists() else 0,
    )


def _fill(store: SqliteJobStore, count: int) -> None:
    """``count`` finished records of one owner, newest last, through the store's own writes."""
    now = time.time()
    holder = this_process()
    for n in range(count):
        started = now - (count - n) * 2.0
        store.insert(
            JobRecord(
                id=f"subagent-{secrets.token_hex(6)}",
                kind="subagent",
                label=f"bench job {n}",
                owner=OWNER,
                origin="bench-origin",
                status=JobStatus.COMPLETED,
                started_at=started,
                holder=holder,
                output=OUTPUT,
                finished_at=started + 1.5,
                reported=True,
                noticed=True,
                meta=META,
            )
        )
    if not store.flush(120.0):
        raise RuntimeError("the store did not write the records within 120 s")


async def _median_ms(call: Callable[[], Awaitable[object]], times: int) -> dict[str, float]:
    await call()  # warm-up: the reading thread's connection, the statement cache
    samples = []
    for _ in range(times):
        began = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - began) * 1000)
    return {
        "median_ms": statistics.median(samples),
        "min_ms": min(samples),
        "max_ms": max(samples),
    }


async def reads(root: Path, times: int) -> dict[str, Any]:
    path = root / "reads.sqlite3"
    store = SqliteJobStore(path, retention_count=LIST_RECORDS * 10)
    registry = JobRegistry(
        JobsConfig(store=str(path), retention_count=LIST_RECORDS * 10), store=store
    )
    try:
        began = time.perf_counter()
        await asyncio.to_thread(_fill, store, LIST_RECORDS)
        fill_s = time.perf_counter() - began
        owner = _Owner(OWNER)
        tool = JobListTool(registry)
        listed = await tool.call({}, owner)
        if listed.is_error or not listed.value or len(listed.value["jobs"]) != 10:
            raise RuntimeError(f"job_list answered {listed.text[:200]!r}")

        async def job_list() -> None:
            await tool.call({}, owner)

        async def first_page() -> None:
            everything = RecordFilter()
            store.correct(store.newest(everything, 20))
            store.count(everything)

        job_list_ms = await _median_ms(job_list, times)
        first_page_ms = await _median_ms(first_page, times)
        total = store.count(RecordFilter())
        full_bytes = _file_bytes(path)
        store.retention_count = DEFAULT_RETENTION
        pruned = await asyncio.to_thread(store.prune)
        pruned_bytes = _file_bytes(path)
        await asyncio.to_thread(store.vacuum)
        vacuumed_bytes = _file_bytes(path)
        kept = store.count(RecordFilter())
    finally:
        await registry.aclose()
    return {
        "records": total,
        "fill_s": fill_s,
        "job_list_text_chars": len(listed.text),
        "job_list": job_list_ms,
        "first_page": first_page_ms,
        "reads": times,
        "job_list_target_ms": JOB_LIST_TARGET_MS,
        "first_page_target_ms": FIRST_PAGE_TARGET_MS,
        "job_list_status": "PASS" if job_list_ms["median_ms"] <= JOB_LIST_TARGET_MS else "MISS",
        "first_page_status": (
            "PASS" if first_page_ms["median_ms"] <= FIRST_PAGE_TARGET_MS else "MISS"
        ),
        "bytes_at_10000": full_bytes[0],
        "wal_bytes_at_10000": full_bytes[1],
        "pruned": pruned,
        "kept": kept,
        "bytes_after_prune": pruned_bytes[0],
        "wal_bytes_after_prune": pruned_bytes[1],
        "bytes_after_prune_and_vacuum": vacuumed_bytes[0],
        "wal_bytes_after_prune_and_vacuum": vacuumed_bytes[1],
    }


# ---- 2. the dsh mcp soak --------------------------------------------------------------------


@dataclass(slots=True)
class Sample:
    jobs: int
    rss_kb: int
    fds: int
    threads: int
    server_children: int
    job_list_chars: int
    store_bytes: int
    wal_bytes: int
    elapsed_s: float


@dataclass(slots=True)
class Soak:
    samples: list[Sample] = field(default_factory=list)
    completed: int = 0
    failures: list[str] = field(default_factory=list)
    server_pid: int = 0


def _toml(value: str) -> str:
    return json.dumps(value)


def _env_table(env: Mapping[str, str]) -> str:
    return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in env.items()) + " }"


def write_profile(root: Path, codex_url: str, claude_url: str) -> Path:
    """Both products against the loopback models; the job store in ``root``."""
    home = write_codex_home(root / "codex-home", codex_url, "soak-model")
    profile = root / "profile.toml"
    lines = [
        '[[provider]]\nkind = "codex"\n[provider.config]\nstderr = "discard"',
        f"dispose_grace_ms = 1000\nenv = {_env_table(codex_env(home))}",
        '[[provider]]\nkind = "claude-code"\n[provider.config]\nstderr = "discard"',
        f"dispose_grace_ms = 1000\nenv = {_env_table(claude_env(root / 'claude', claude_url))}",
        f"[jobs]\nstore = {_toml(str(root / 'state' / 'jobs.sqlite3'))}",
        "max_concurrent_jobs_per_owner = 8",
    ]
    profile.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return profile


@contextlib.asynccontextmanager
async def _session(root: Path, profile: Path, workspace: Path) -> AsyncIterator[ClientSession]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSH_")}
    env["XDG_STATE_HOME"] = str(root / "xdg-state")  # the user's default store is never used
    params = StdioServerParameters(
        command=str(DSH),
        args=["mcp", "--profile", str(profile), "--cwd", str(workspace)],
        cwd=str(workspace),
        env=env,
    )
    with (root / "dsh-mcp.stderr").open("a", encoding="utf-8") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            with anyio.fail_after(INIT_TIMEOUT_S):
                await session.initialize()
            yield session


async def _call(session: ClientSession, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
    result = await session.call_tool(name, arguments, read_timeout_seconds=CALL_TIMEOUT_S)
    if not isinstance(result, types.CallToolResult):
        return f"unexpected result {type(result).__name__}", True
    block = result.content[0] if result.content else None
    text = block.text if isinstance(block, types.TextContent) else repr(block)
    return text, bool(result.is_error)


async def _delegate(session: ClientSession, n: int) -> str | None:
    """One background delegation, collected; ``None`` if it completed with its answer."""
    tool = TOOLS[n % 2]
    task = f"soak job {n}"
    arguments = {"description": task, "prompt": task, "run_in_background": True}
    text, is_error = await _call(session, tool, arguments)
    if is_error or not text.startswith("started background subagent job "):
        return f"{tool} start: {text[:200]}"
    job_id = text.rsplit(" ", 1)[1]
    collect = {"job_id": job_id, "wait": True, "timeout_ms": JOB_WAIT_MS}
    text, is_error = await _call(session, "job_output", collect)
    if is_error or text != f"{ANSWERS[tool]}\n[status: completed]":
        return f"{tool} {job_id}: {text[-200:]}"
    return None


def _server_pid(profile: Path) -> int:
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            cmdline = child.cmdline()
            if "mcp" in cmdline and str(profile) in cmdline:
                return int(child.pid)
    raise RuntimeError("the dsh mcp server process was not found")


def _server_sample(pid: int, jobs: int, chars: int, store: Path, began: float) -> Sample:
    server = psutil.Process(pid)
    main, wal = _file_bytes(store)
    return Sample(
        jobs=jobs,
        rss_kb=int(server.memory_info().rss) // 1024,
        fds=sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir()),
        threads=int(server.num_threads()),
        server_children=len(server.children(recursive=True)),
        job_list_chars=chars,
        store_bytes=main,
        wal_bytes=wal,
        elapsed_s=round(time.perf_counter() - began, 1),
    )


async def _sample(
    session: ClientSession, soak: Soak, jobs: int, store: Path, began: float
) -> Sample:
    text, is_error = await _call(session, "job_list", {})
    if is_error:
        soak.failures.append(f"job_list: {text[:200]}")
    sample = _server_sample(soak.server_pid, jobs, len(text), store, began)
    soak.samples.append(sample)
    print(
        f"  {sample.jobs:>5} jobs  RSS {sample.rss_kb / 1024:7.1f} MB  fds {sample.fds:>3}"
        f"  threads {sample.threads:>3}  children {sample.server_children}"
        f"  job_list {sample.job_list_chars:>4} chars  store {sample.store_bytes / 1024:6.0f}"
        f" + WAL {sample.wal_bytes / 1024:5.0f} KB"
        f"  {sample.elapsed_s:7.1f} s",
        flush=True,
    )
    return sample


async def _block(session: ClientSession, soak: Soak, first: int, last: int) -> None:
    """Jobs ``first`` to ``last - 1``, ``SOAK_CONCURRENCY`` at a time."""
    pending = iter(range(first, last))

    async def worker() -> None:
        for n in pending:
            if len(soak.failures) >= MAX_FAILURES:
                return
            try:
                problem = await _delegate(session, n)
            except Exception as exc:  # a timeout, a closed connection: counted, not fatal
                problem = f"job {n}: {type(exc).__name__}: {str(exc)[:200]}"
            if problem is None:
                soak.completed += 1
            else:
                soak.failures.append(problem)

    async with asyncio.TaskGroup() as group:
        for _ in range(SOAK_CONCURRENCY):
            group.create_task(worker())


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _processes_naming(root: Path) -> list[int]:
    """Live processes whose command line, working directory or environment names ``root``."""
    return processes_naming(str(root))


async def _gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [pid for pid in pids if _alive(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        await asyncio.sleep(0.05)


def _slope_kb_per_job(samples: list[Sample]) -> tuple[float, float]:
    """RSS growth in KB per job from the first to the last sample, and the least-squares slope."""
    if len(samples) < 2:
        return 0.0, 0.0
    first, last = samples[0], samples[-1]
    two_point = (last.rss_kb - first.rss_kb) / (last.jobs - first.jobs)
    fit = statistics.linear_regression([s.jobs for s in samples], [s.rss_kb for s in samples])
    return two_point, fit.slope


async def soak(root: Path, jobs: int, every: int) -> dict[str, Any]:
    workspace = root / "workspace"
    workspace.mkdir(parents=True)
    store = root / "state" / "jobs.sqlite3"
    result = Soak()
    leftover: list[int] = []
    server_exited = True
    began = time.perf_counter()
    codex_reply = Reply((MessageItem(ANSWERS["subagent_codex"]),))
    claude_reply = ClaudeReply("text", text=ANSWERS["subagent_claude_code"])
    async with (
        FakeResponsesServer(default=codex_reply) as codex,
        FakeMessagesServer(default=claude_reply) as claude,
    ):
        profile = write_profile(root, codex.base_url, claude.base_url)
        budget = 300.0 + jobs * 10.0
        try:
            with anyio.fail_after(budget):
                async with _session(root, profile, workspace) as session:
                    result.server_pid = _server_pid(profile)
                    print(f"dsh mcp soak: server pid {result.server_pid}", flush=True)
                    await _sample(session, result, 0, store, began)
                    for first in range(0, jobs, every):
                        last = min(first + every, jobs)
                        await _block(session, result, first, last)
                        await _sample(session, result, last, store, began)
                        if len(result.failures) >= MAX_FAILURES:
                            print(f"  stopping: {len(result.failures)} failures", flush=True)
                            break
        finally:
            # The server exits once its stdin closes (stdio_client's exit); prove it, and that
            # no product process is left, then end whatever is (by pid: ours alone).
            if result.server_pid and await _gone([result.server_pid], EXIT_TIMEOUT_S):
                server_exited = False
                with contextlib.suppress(ProcessLookupError):
                    os.kill(result.server_pid, signal.SIGKILL)
            leftover = await _gone(_processes_naming(root), EXIT_TIMEOUT_S)
            for pid in leftover:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        codex_requests, claude_requests = len(codex.requests), len(claude.requests)
    wall = time.perf_counter() - began
    after_first = result.samples[1:]  # the samples from the first --sample-every jobs on
    two_point, fit = _slope_kb_per_job(after_first)
    # The second half alone: growth that stops (caches filling up to the store's retention)
    # shows here as a flat line, a per-job leak as the same slope as the whole.
    _, second_half = _slope_kb_per_job([s for s in after_first if s.jobs >= jobs // 2])
    fds = [s.fds for s in after_first] or [0]
    chars = [s.job_list_chars for s in after_first] or [0]
    return {
        "jobs": jobs,
        "sample_every": every,
        "concurrency": SOAK_CONCURRENCY,
        "completed": result.completed,
        "failed": jobs - result.completed,
        "failures": result.failures[:10],
        "wall_s": wall,
        "jobs_per_s": result.completed / wall if wall else 0.0,
        "samples": [asdict(s) for s in result.samples],
        "rss_kb_per_job_first_to_last": two_point,
        "rss_kb_per_job_fit": fit,
        "rss_kb_per_job_second_half_fit": second_half,
        "rss_mb_first": after_first[0].rss_kb / 1024 if after_first else 0.0,
        "rss_mb_last": after_first[-1].rss_kb / 1024 if after_first else 0.0,
        "fds_min": min(fds),
        "fds_max": max(fds),
        "job_list_chars_min": min(chars),
        "job_list_chars_max": max(chars),
        "model_requests": {"codex": codex_requests, "claude": claude_requests},
        "server_exited": server_exited,
        "leftover_processes": leftover,
    }


# ---- report -----------------------------------------------------------------------------------


def _print_cost(title: str, cost: dict[str, Any]) -> None:
    print(f"  {title}:")
    for side in SIDES:
        figures = cost[side]
        print(
            f"    {side:<7} CPU {figures['cpu_us_per_job']:7.1f} µs/job"
            f"   wall {figures['wall_us_per_job']:7.1f} µs/job"
            f"   runs {figures['cpu_us_runs']}   failed {figures['failed']}"
        )
    print(
        f"    sqlite/memory CPU x{cost['cpu_ratio_sqlite_vs_memory']:.2f},"
        f" {cost['cpu_extra_us_per_job']:+.1f} µs CPU/job"
        f" ({cost['wall_extra_us_per_job']:+.1f} µs wall/job)"
    )


def print_report(report: dict[str, Any]) -> None:
    shipped = report["store_cost"]
    print(
        f"\n1. store cost per job ({shipped['jobs']} jobs, batches of {shipped['batch']}, median"
        f" of {shipped['rounds']} rounds; CPU = process_time, every thread incl. the writer):"
    )
    _print_cost(f"default retention ({DEFAULT_RETENTION} finished records)", shipped)
    _print_cost(
        f"retention {report['store_cost_no_prune']['retention']} (no pruning)",
        report["store_cost_no_prune"],
    )
    r = report["reads"]
    print(f"   reads at {r['records']} finished records of one owner (median of {r['reads']}):")
    print(
        f"    job_list             {r['job_list']['median_ms']:7.2f} ms"
        f"  (target <= {JOB_LIST_TARGET_MS:.0f} ms)  {r['job_list_status']}"
        f"   [{r['job_list_text_chars']} chars]"
    )
    print(
        f"    jobs list first page {r['first_page']['median_ms']:7.2f} ms"
        f"  (target <= {FIRST_PAGE_TARGET_MS:.0f} ms) {r['first_page_status']}"
    )

    def kb(key: str) -> str:
        return f"{r[key] / 1024:.0f} (+ {r['wal_' + key] / 1024:.0f})"

    print(
        f"    file (+ WAL) in KB: {kb('bytes_at_10000')} at {r['records']} records;"
        f" {kb('bytes_after_prune')} after pruning to {r['kept']} ({r['pruned']} pruned);"
        f" {kb('bytes_after_prune_and_vacuum')} after vacuum()"
    )
    s = report.get("soak")
    if s is None:
        return
    print(
        f"\n2. dsh mcp soak: {s['completed']}/{s['jobs']} completed, {s['failed']} failed,"
        f" {s['wall_s']:.0f} s ({s['jobs_per_s']:.2f} jobs/s)"
    )
    print(
        f"   RSS {s['rss_mb_first']:.1f} -> {s['rss_mb_last']:.1f} MB from job"
        f" {s['sample_every']} on: {s['rss_kb_per_job_first_to_last']:+.2f} KB/job (first to"
        f" last), {s['rss_kb_per_job_fit']:+.2f} KB/job (fit),"
        f" {s['rss_kb_per_job_second_half_fit']:+.2f} KB/job (fit, second half)"
        "   [in-memory registry: +7.5]"
    )
    print(
        f"   fds {s['fds_min']}..{s['fds_max']}   job_list"
        f" {s['job_list_chars_min']}..{s['job_list_chars_max']} chars"
        f"   server exited: {s['server_exited']}   leftover processes: {s['leftover_processes']}"
    )
    for failure in s["failures"]:
        print(f"   failure: {failure}")


async def bench(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    load_before = os.getloadavg()
    report: dict[str, Any] = {
        "meta": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "quick": args.quick,
            "loadavg_before": load_before,
        }
    }
    print(f"load average before: {load_before}", flush=True)
    report["store_cost"] = await store_cost(
        root, args.jobs, args.batch, args.rounds, DEFAULT_RETENTION
    )
    report["store_cost_no_prune"] = await store_cost(
        root, args.jobs, args.batch, args.rounds, max(args.jobs * 2, 10 * DEFAULT_RETENTION)
    )
    report["reads"] = await reads(root, args.reads)
    if not args.no_soak:
        report["soak"] = await soak(root / "soak", args.soak_jobs, args.sample_every)
    report["meta"]["loadavg_after"] = os.getloadavg()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="200 jobs, a soak of 100")
    parser.add_argument("--jobs", type=int, help="jobs per store run (2000; --quick 200)")
    parser.add_argument("--batch", type=int, default=50, help="jobs started at once (50)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per store (5)")
    parser.add_argument("--reads", type=int, default=20, help="calls per read figure (20)")
    parser.add_argument("--no-soak", action="store_true", help="skip the dsh mcp soak")
    parser.add_argument("--soak-jobs", type=int, help="soak delegations (2000; --quick 100)")
    parser.add_argument("--sample-every", type=int, help="jobs between samples (250; --quick 25)")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    if args.jobs is None:
        args.jobs = 200 if args.quick else 2000
    if args.soak_jobs is None:
        args.soak_jobs = 100 if args.quick else 2000
    if args.sample_every is None:
        args.sample_every = 25 if args.quick else 250
    root = Path(tempfile.mkdtemp(prefix="dsh-jobs-bench-"))
    try:
        report = asyncio.run(bench(args, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_report(report)
    print(f"\nload average after: {report['meta']['loadavg_after']}")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    # Timing targets never fail the run; a failed job or a process left behind does.
    soaked = report.get("soak", {})
    broken = [
        soaked.get("failed", 0),
        not soaked.get("server_exited", True),
        soaked.get("leftover_processes", []),
        *(report[part][side]["failed"] for part in COST_PARTS for side in SIDES),
    ]
    return 1 if any(broken) else 0


if __name__ == "__main__":
    sys.exit(main())
