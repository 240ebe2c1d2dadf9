"""The cost of ``workspace = "worktree"``: making and removing a worktree per run on a
repository of 10,000 files, against the run itself, in the same run.

Run: ``uv run python tests-e2e/benchmarks/worktree.py [--quick] [--no-products] [--json OUT]``.

The repository: ``--files`` files (10,000; ``--quick`` 300) of 1 to 4 KB of source-like text,
spread over ``src/``, ``tests/`` and ``docs/`` in packages of 16 directories of 25 files, with a
README and a ``.gitignore``; committed once, then packed (as a clone is), with every file's
mtime an hour old (the parent's index is not "racily clean", as a real checkout's is not).
``XDG_STATE_HOME`` is a temporary directory: the worktrees root and the job store are never the
user's.

1. **The worktree lifecycle alone** (no product): ``make_worktree`` then ``finish_worktree``
   (keep the changes on a branch, remove the worktree, unregister it), three cases: ``head``
   base with nothing changed; ``head`` base with one file edited in the worktree (the edit
   itself is not timed; the run's branch is deleted between rounds); ``working-tree`` base with
   one uncommitted change in the parent (the snapshot commit). Each case: one unrecorded
   warm-up (it also measures the checkout's disk use), then the median of ``--rounds`` rounds
   of: wall time of each step, and CPU. **Host CPU** is ``time.process_time()`` (every thread
   of this process: the event loop, dsh's worker threads). **Children CPU** is the CPU of the
   processes below this one: git, and the ``dsh.subprocess`` spawner and supervisors that start
   it. It is ``RUSAGE_CHILDREN`` of this process (children it reaped; git itself is not one:
   the spawner's supervisors reap it) plus, for every live descendant, its own user + system
   time and that of the children it reaped (``/proc`` through psutil, in 10 ms ticks per
   process; so a figure is good to about +/- 20 ms a round).
2. **A real delegation of each product** (Codex in ``approve-for-me``, Claude Code in
   ``acceptEdits``, both against loopback fake models; the model writes ``edit.txt`` with the
   product's own tool, then answers), ``workspace = "shared"`` against ``"worktree"``
   (``head`` base), on the same repository, one harness for all: one unrecorded warm-up per
   side, then ``--runs`` runs per side, the order alternating; the median wall time of
   ``Tool.call`` per side, the ratio worktree/shared and the added milliseconds. A shared run's
   ``edit.txt`` is removed after it, a worktree run's branch deleted.

No timing is asserted (the machine is shared; no target is set). Every wait is bounded; the
fake model servers are stopped (their ports checked closed); at the end no worktree is left
registered in the repository, no directory under the worktrees root, and no process working in
the temporary directory (checked; a failure or a leftover makes the exit code 1).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil

from dsh.subagent_claude_code.testing import FakeMessagesServer
from dsh.subagent_claude_code.testing import hermetic_env as claude_env
from dsh.subagent_codex.testing import FakeResponsesServer, write_codex_home
from dsh.subagent_codex.testing import hermetic_env as codex_env
from dsh.tool_subagent import Caller, Harness
from dsh.tool_subagent._workspace import Changes, WorkspaceOptions
from dsh.tool_subagent._worktree import finish_worktree, make_worktree, worktrees_root

PRODUCTS = ("codex", "claude-code")
SIDES = ("shared", "worktree")
CASES = ("head_unchanged", "head_one_edit", "working_tree_one_change")
CASE_TITLES = {
    "head_unchanged": "head base, nothing changed",
    "head_one_edit": "head base, one file edited",
    "working_tree_one_change": "working-tree base, 1 uncommitted",
}
FIGURES = ("make_ms", "finish_ms", "total_ms", "host_cpu_ms", "children_cpu_ms", "cpu_ms")
PERMISSION = {"codex": "approve-for-me", "claude-code": "acceptEdits"}
EDIT_FILE = "edit.txt"
#: Files per directory and directories per package in the generated repository.
PER_DIR = 25
DIRS_PER_PACKAGE = 16
TOPS = ("src", "src", "src", "tests", "docs")
#: Bounds of every wait.
GIT_SETUP_TIMEOUT_S = 600.0
LIFECYCLE_TIMEOUT_S = 300.0
DELEGATION_TIMEOUT_S = 180.0
LEFTOVER_TIMEOUT_S = 15.0


# ---- the repository -----------------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    """Git in the benchmark's own temporary repository (setup and cleanup, never timed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    done = subprocess.run(  # noqa: TID251 - git in a temporary repository
        ["git", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
        timeout=GIT_SETUP_TIMEOUT_S,
        env=env,
    )
    return done.stdout


def _content(rng: random.Random, index: int) -> str:
    """1 to 4 KB of source-like text, distinct per file."""
    size = rng.randint(1024, 4096)
    lines = [f'"""Module {index}: generated for the worktree benchmark."""\n\n']
    total = len(lines[0])
    k = 0
    while total < size:
        line = f"def f_{index}_{k}(x: int) -> int:\n    return x * {rng.randint(2, 999)} + {k}\n\n"
        lines.append(line)
        total += len(line)
        k += 1
    return "".join(lines)[:size]


def _paths(files: int) -> Iterator[tuple[int, str]]:
    per_package = PER_DIR * DIRS_PER_PACKAGE
    for index in range(files):
        package, within = divmod(index, per_package)
        top = TOPS[package % len(TOPS)]
        suffix = {"src": "py", "tests": "py", "docs": "md"}[top]
        directory = f"{top}/pkg{package:03d}/mod{within // PER_DIR:02d}"
        yield index, f"{directory}/file{index:05d}.{suffix}"


def make_repository(repo: Path, files: int) -> dict[str, Any]:
    """The benchmark's repository, committed once and packed; its facts."""
    began = time.perf_counter()
    rng = random.Random(20240611)
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "bench")
    git(repo, "config", "user.email", "bench@example.invalid")
    (repo / "README.md").write_text("# bench project\n", encoding="utf-8")
    (repo / ".gitignore").write_text("*.log\n__pycache__/\n", encoding="utf-8")
    total_bytes = 0
    directories: set[str] = set()
    for index, relative in _paths(files):
        path = repo / relative
        if path.parent.name not in directories:
            path.parent.mkdir(parents=True, exist_ok=True)
            directories.add(str(path.parent))
        text = _content(rng, index)
        path.write_text(text, encoding="utf-8")
        total_bytes += len(text)
    # An hour-old checkout: the index written now is newer than every file, as a real one is.
    old = time.time() - 3600
    for path in repo.rglob("*"):
        if ".git" not in path.parts:
            os.utime(path, (old, old))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the project")
    git(repo, "repack", "-adq")
    git(repo, "status", "--porcelain")  # the index refreshed and written, as after a clone
    tracked = len(git(repo, "ls-files", "-z").split("\0")) - 1
    return {
        "files": tracked,
        "bytes": total_bytes,
        "directories": len(directories),
        "git_dir_bytes": _disk(repo / ".git")["allocated_bytes"],
        "setup_s": time.perf_counter() - began,
    }


def _disk(path: Path) -> dict[str, int]:
    """``du``'s figures for ``path``: allocated bytes, apparent bytes, files."""
    allocated = apparent = count = 0
    for entry in [path, *path.rglob("*")]:
        with contextlib.suppress(OSError):
            info = entry.lstat()
            allocated += info.st_blocks * 512
            apparent += info.st_size
            count += entry.is_file()
    return {"allocated_bytes": allocated, "apparent_bytes": apparent, "files": count}


def _fs_type(path: Path) -> str:
    """The file system type holding ``path`` (the longest mount point that is its prefix)."""
    best, kind = "", "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) > 2 and str(path).startswith(parts[1]) and len(parts[1]) > len(best):
                best, kind = parts[1], parts[2]
    return kind


# ---- CPU of this process's children ------------------------------------------------------------


def children_cpu_s() -> float:
    """CPU seconds of every process below this one, so far: reaped (``RUSAGE_CHILDREN``) and
    live (own and their reaped children's, from ``/proc``)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


@dataclass
class Clock:
    """Wall and CPU at one instant."""

    wall: float
    host: float
    children: float

    @classmethod
    def now(cls) -> Clock:
        children = children_cpu_s()  # the /proc walk's own CPU falls outside the host figure
        return cls(time.perf_counter(), time.process_time(), children)

    @classmethod
    def later(cls) -> Clock:
        wall, host = time.perf_counter(), time.process_time()
        return cls(wall, host, children_cpu_s())


# ---- 1. the lifecycle alone -------------------------------------------------------------------


async def _settle() -> None:
    """Let the spawner reap the supervisors of the last git commands (their CPU then counts in
    the spawner's children figure; live or zombie, it counts anyway)."""
    await asyncio.sleep(0.05)


async def _one_lifecycle(repo: Path, case: str, tag: str, measure_disk: bool) -> dict[str, Any]:
    base = "working-tree" if case == "working_tree_one_change" else "head"
    options = WorkspaceOptions("worktree", base)  # type: ignore[arg-type]
    name = f"bench-{tag}-{secrets.token_hex(3)}"
    out: dict[str, Any] = {}
    async with asyncio.timeout(LIFECYCLE_TIMEOUT_S):
        await _settle()
        start = Clock.now()
        worktree = await make_worktree(str(repo), options, name)
        made = Clock.later()
        edited = ""
        if case == "head_one_edit":
            edited = next(p for _, p in _paths(1))
            path = worktree.tree / edited
            path.write_text(path.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
        if measure_disk:
            out["disk"] = _disk(worktree.tree)
            out["admin_disk"] = _disk(worktree.common_dir / "worktrees" / worktree.tree.name)
        await _settle()
        begin_finish = Clock.now()
        changes = await finish_worktree(worktree)
        finished = Clock.later()
        await _settle()
        after = Clock.now()
    out |= {
        "make_ms": (made.wall - start.wall) * 1000,
        "finish_ms": (finished.wall - begin_finish.wall) * 1000,
        "host_cpu_ms": ((made.host - start.host) + (finished.host - begin_finish.host)) * 1000,
        # The settling sleep's window counts for the children: a supervisor reaped meanwhile.
        "children_cpu_ms": (
            (made.children - start.children) + (after.children - begin_finish.children)
        )
        * 1000,
    }
    out["total_ms"] = out["make_ms"] + out["finish_ms"]
    out["cpu_ms"] = out["host_cpu_ms"] + out["children_cpu_ms"]
    out["problem"] = _check_changes(repo, case, changes, edited)
    if changes.branch is not None:
        git(repo, "branch", "-D", "-q", changes.branch)
    return out


def _check_changes(repo: Path, case: str, changes: Changes, edited: str) -> str | None:
    head = git(repo, "rev-parse", "HEAD").strip()
    if not changes.kept:
        return f"{case}: the changes were not kept"
    if case == "head_one_edit":
        if changes.files != (edited,) or changes.branch is None:
            return f"{case}: expected one edited file on a branch, got {changes.line!r}"
    elif changes.branch is not None:
        return f"{case}: expected no changes, got {changes.line!r}"
    if (case == "working_tree_one_change") == (changes.base == head):
        return f"{case}: unexpected base {changes.base} (HEAD {head})"
    return None


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


async def lifecycle(repo: Path, rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {"rounds": rounds}
    parent_file = repo / next(p for _, p in _paths(2) if p.endswith("00001.py"))
    original = parent_file.read_bytes()
    for case in CASES:
        if case == "working_tree_one_change":
            parent_file.write_bytes(original + b"# the parent's uncommitted line\n")
        try:
            warm = await _one_lifecycle(repo, case, f"{case[:4]}-warm", measure_disk=True)
            runs = [
                await _one_lifecycle(repo, case, f"{case[:4]}-{n:02d}", measure_disk=False)
                for n in range(rounds)
            ]
        finally:
            parent_file.write_bytes(original)
        figures: dict[str, Any] = {key: _median(runs, key) for key in FIGURES}
        figures["runs_total_ms"] = [round(r["total_ms"], 1) for r in runs]
        figures["runs_cpu_ms"] = [round(r["cpu_ms"], 1) for r in runs]
        figures["disk"] = warm["disk"]
        figures["admin_disk"] = warm["admin_disk"]
        figures["problems"] = [p for p in [warm["problem"], *(r["problem"] for r in runs)] if p]
        out[case] = figures
        print(
            f"  lifecycle {case}: total {figures['total_ms']:.0f} ms, CPU"
            f" {figures['cpu_ms']:.0f} ms",
            flush=True,
        )
    return out


# ---- 2. real delegations ----------------------------------------------------------------------


def _tool_name(product: str, side: str) -> str:
    return f"{product.replace('-', '_')}_{side}"


def _profile(root: Path, codex: FakeResponsesServer, claude: FakeMessagesServer) -> dict[str, Any]:
    home = write_codex_home(root / "codex-home", codex.base_url, "mock-model")
    common = {"stderr": "discard", "dispose_grace_ms": 1000}
    envs = {"codex": codex_env(home), "claude-code": claude_env(root / "claude", claude.base_url)}
    return {
        "provider": [
            {
                "kind": product,
                "config": common | {"permission_mode": PERMISSION[product], "env": envs[product]},
            }
            for product in PRODUCTS
        ],
        "tool": [
            {"provider": product, "tool_name": _tool_name(product, side), "workspace": side}
            for product in PRODUCTS
            for side in SIDES
        ],
    }


def _script_edit(
    product: str, task: str, text: str, codex: FakeResponsesServer, claude: FakeMessagesServer
) -> None:
    """The model writes ``edit.txt`` with the product's own tool, then answers."""
    if product == "codex":
        command = f"printf '%s\\n' '{text}' > {EDIT_FILE}"
        codex.queue_tool_call("exec_command", {"cmd": command, "login": False}, match=task)
        codex.queue_text(f"wrote {text}", match=task)
    else:
        claude.queue_tool_call(
            "Write", {"file_path": EDIT_FILE, "content": text + "\n"}, match=task
        )
        claude.queue_text(f"wrote {text}", match=task)


async def _delegate(
    harness: Harness,
    repo: Path,
    product: str,
    side: str,
    label: str,
    servers: tuple[FakeResponsesServer, FakeMessagesServer],
) -> tuple[float, str | None]:
    """One delegation: its wall time (ms) and a problem, if any."""
    task = f"bench {product} {side} {label} edit"
    text = f"{product}-{side}-{label}"
    _script_edit(product, task, text, *servers)
    tool = harness.tool(_tool_name(product, side))
    began = time.perf_counter()
    try:
        async with asyncio.timeout(DELEGATION_TIMEOUT_S):
            out = await tool.call(
                {"description": "edit", "prompt": task}, Caller("bench", str(repo))
            )
    except TimeoutError:
        return (
            time.perf_counter() - began
        ) * 1000, f"{task}: no answer in {DELEGATION_TIMEOUT_S} s"
    wall = (time.perf_counter() - began) * 1000
    problem: str | None = None
    if out.is_error:
        problem = f"{task}: error {out.text[:300]!r}"
    elif side == "shared":
        edit = repo / EDIT_FILE
        if not edit.is_file() or edit.read_text(encoding="utf-8") != text + "\n":
            problem = f"{task}: {EDIT_FILE} not written in the repository"
        edit.unlink(missing_ok=True)
    else:
        facts = (out.meta or {}).get("workspace", {})
        branch = facts.get("branch")
        if facts.get("files") != [EDIT_FILE] or not branch:
            problem = f"{task}: unexpected workspace facts {facts!r}"
        if branch:
            git(repo, "branch", "-D", "-q", branch)
    if git(repo, "status", "--porcelain"):
        problem = problem or f"{task}: the repository is not clean after the run"
    return wall, problem


def _port_closed(base_url: str) -> bool:
    parts = urlsplit(base_url)
    with socket.socket() as sock:
        sock.settimeout(2.0)
        try:
            sock.connect((parts.hostname or "127.0.0.1", parts.port or 80))
        except OSError:
            return True
    return False


async def delegations(root: Path, repo: Path, runs: int) -> dict[str, Any]:
    samples: dict[str, dict[str, list[float]]] = {p: {s: [] for s in SIDES} for p in PRODUCTS}
    problems: list[str] = []
    async with FakeResponsesServer() as codex:
        with FakeMessagesServer() as claude:
            servers = (codex, claude)
            urls = (codex.base_url, claude.base_url)
            async with Harness.from_profile(_profile(root, codex, claude)) as harness:
                for product in PRODUCTS:
                    for side in SIDES:  # warm-up: the product's first start, caches
                        _, problem = await _delegate(harness, repo, product, side, "warm", servers)
                        problems += [problem] if problem else []
                    for n in range(runs):
                        order = SIDES if n % 2 == 0 else SIDES[::-1]
                        for side in order:
                            wall, problem = await _delegate(
                                harness, repo, product, side, f"r{n:03d}", servers
                            )
                            samples[product][side].append(wall)
                            problems += [problem] if problem else []
                    shared = statistics.median(samples[product]["shared"])
                    worktree = statistics.median(samples[product]["worktree"])
                    print(
                        f"  {product}: shared {shared:.0f} ms, worktree {worktree:.0f} ms",
                        flush=True,
                    )
            pending = codex.pending + claude.pending
    out: dict[str, Any] = {
        "runs": runs,
        "problems": problems,
        "unused_model_replies": pending,
        "servers_stopped": all(_port_closed(url) for url in urls),
    }
    for product in PRODUCTS:
        shared = statistics.median(samples[product]["shared"])
        worktree = statistics.median(samples[product]["worktree"])
        out[product] = {
            "permission_mode": PERMISSION[product],
            "shared_ms": shared,
            "worktree_ms": worktree,
            "ratio": worktree / shared,
            "added_ms": worktree - shared,
            "shared_runs_ms": [round(v, 1) for v in samples[product]["shared"]],
            "worktree_runs_ms": [round(v, 1) for v in samples[product]["worktree"]],
        }
    return out


# ---- leftovers --------------------------------------------------------------------------------


def _working_under(root: Path) -> list[int]:
    """Live processes whose cwd is inside ``root``."""
    needle = str(root)
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.cwd().startswith(needle):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


async def leftovers(root: Path, repo: Path) -> dict[str, Any]:
    deadline = time.monotonic() + LEFTOVER_TIMEOUT_S
    while True:
        working = _working_under(root)
        if not working or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.1)
    registered = [
        line.removeprefix("worktree ")
        for line in git(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]
    admin = repo / ".git" / "worktrees"
    admin_left = sorted(p.name for p in admin.iterdir()) if admin.exists() else []
    wt_root = worktrees_root()
    dirs = (
        sorted(p.name for p in wt_root.iterdir() if p.name != "locks") if wt_root.exists() else []
    )
    extra = [path for path in registered if Path(path) != repo]
    return {
        "registered_worktrees": registered,
        "extra_registered": extra,
        "admin_dirs_left": admin_left,
        "worktree_dirs_left": dirs,
        "worktrees_root_under_temp": wt_root.is_relative_to(root),
        "processes_left": working,
        "ok": not (extra or admin_left or dirs or working) and wt_root.is_relative_to(root),
    }


# ---- report -----------------------------------------------------------------------------------


def _kb(value: int) -> str:
    return f"{value / 1024:,.0f} KB"


def print_report(report: dict[str, Any]) -> None:
    r = report["repository"]
    print(
        f"\nrepository: {r['files']:,} files, {r['bytes'] / 1e6:.1f} MB in {r['directories']}"
        f" directories, .git {_kb(r['git_dir_bytes'])} packed ({r['setup_s']:.1f} s to make);"
        f" in {report['meta']['dir']} ({report['meta']['fs']})"
    )
    life = report["lifecycle"]
    print(
        f"\n1. worktree lifecycle alone (median of {life['rounds']} rounds; CPU = host"
        " process_time + children: git and its spawner/supervisors)"
    )
    print(
        f"  {'case':<34}{'make':>8}{'finish':>8}{'total':>8}  {'host CPU':>9}{'child CPU':>10}"
        f"{'CPU':>7}   runs total ms"
    )
    for case in CASES:
        f = life[case]
        print(
            f"  {CASE_TITLES[case]:<34}{f['make_ms']:6.0f}ms{f['finish_ms']:6.0f}ms"
            f"{f['total_ms']:6.0f}ms  {f['host_cpu_ms']:7.0f}ms{f['children_cpu_ms']:8.0f}ms"
            f"{f['cpu_ms']:5.0f}ms   {f['runs_total_ms']}"
        )
    disk, admin = life["head_unchanged"]["disk"], life["head_unchanged"]["admin_disk"]
    print(
        f"  worktree on disk: checkout {_kb(disk['allocated_bytes'])} allocated"
        f" ({_kb(disk['apparent_bytes'])} apparent, {disk['files']:,} files); its git admin"
        f" dir (index) {_kb(admin['allocated_bytes'])}"
    )
    d = report.get("delegations")
    if d is not None:
        print(
            f"\n2. one real delegation, shared vs worktree (median of {d['runs']} runs per side,"
            " order alternating; wall of Tool.call)"
        )
        lifecycle_ms = life["head_one_edit"]["total_ms"]
        for product in PRODUCTS:
            p = d[product]
            print(
                f"  {product:<12} ({p['permission_mode']:<14}) shared {p['shared_ms']:6.0f} ms"
                f"  worktree {p['worktree_ms']:6.0f} ms   worktree/shared x{p['ratio']:.2f},"
                f" added {p['added_ms']:+.0f} ms"
            )
            print(
                f"  {'':<12}  shared runs {p['shared_runs_ms']}  worktree runs"
                f" {p['worktree_runs_ms']}"
            )
        print(
            f"  (the lifecycle alone, one file edited, measured above: {lifecycle_ms:.0f} ms"
            f" wall, {life['head_one_edit']['cpu_ms']:.0f} ms CPU)"
        )
        print(
            f"  model replies left unused: {d['unused_model_replies']};"
            f" fake servers stopped: {d['servers_stopped']}"
        )
        for problem in d["problems"]:
            print(f"  problem: {problem}")
    left = report["leftovers"]
    print(
        f"\nleftovers: extra registered worktrees {left['extra_registered']}, admin dirs"
        f" {left['admin_dirs_left']}, dirs under the worktrees root"
        f" {left['worktree_dirs_left']}, processes {left['processes_left']}:"
        f" {'none' if left['ok'] else 'FOUND'}"
    )
    for case in CASES:
        for problem in life[case]["problems"]:
            print(f"  problem: {problem}")


async def bench(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    load_before = os.getloadavg()
    print(f"load average before: {load_before}", flush=True)
    repo = root / "project"
    report: dict[str, Any] = {
        "meta": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "git": git(root, "--version").strip(),
            "quick": args.quick,
            "dir": str(root.parent),
            "fs": _fs_type(root),
            "loadavg_before": load_before,
        }
    }
    report["repository"] = await asyncio.to_thread(make_repository, repo, args.files)
    print(f"repository: {report['repository']['files']} files", flush=True)
    try:
        report["lifecycle"] = await lifecycle(repo, args.rounds)
        if not args.no_products:
            report["delegations"] = await delegations(root, repo, args.runs)
    finally:
        report["leftovers"] = await leftovers(root, repo)
    report["meta"]["loadavg_after"] = os.getloadavg()
    return report


def _failed(report: dict[str, Any]) -> bool:
    problems = [p for case in CASES for p in report["lifecycle"][case]["problems"]]
    d = report.get("delegations", {})
    problems += d.get("problems", [])
    return bool(problems) or not report["leftovers"]["ok"] or not d.get("servers_stopped", True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="300 files, 2 rounds, 1 run a side")
    parser.add_argument("--files", type=int, help="files in the repository (10000; --quick 300)")
    parser.add_argument("--rounds", type=int, help="lifecycle rounds per case (7; --quick 2)")
    parser.add_argument("--runs", type=int, help="delegations per product and side (5; --quick 1)")
    parser.add_argument("--no-products", action="store_true", help="skip the real delegations")
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument(
        "--dir", type=Path, help="make the temporary directory here (the system's temp dir)"
    )
    args = parser.parse_args(argv)
    defaults: dict[str, tuple[int, int]] = {
        "files": (10_000, 300),
        "rounds": (7, 2),
        "runs": (5, 1),
    }
    for key, (full, quick) in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    began = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="dsh-worktree-bench-", dir=args.dir)).resolve()
    # The worktrees root and the job store live here, never in the user's state directory.
    os.environ["XDG_STATE_HOME"] = str(root / "state")
    try:
        report = asyncio.run(bench(args, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report["meta"]["wall_s"] = time.perf_counter() - began
    print_report(report)
    print(
        f"\nload average after: {report['meta']['loadavg_after']};"
        f" {report['meta']['wall_s']:.1f} s in all"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 1 if _failed(report) else 0


if __name__ == "__main__":
    sys.exit(main())
