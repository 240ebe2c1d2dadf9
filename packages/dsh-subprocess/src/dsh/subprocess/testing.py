"""Helpers for test suites that check no process tree outlived its test.

``spawner_processes`` lists dsh's own spawner and supervisors, to leave out of such checks.
``describe_processes`` turns the pids a leak guard found into lines that say what leaked (name,
state, parent, the start of its command line, its tree marker), so a rare leak in CI can be
traced from the failure message alone. Test-only: the lines may hold paths and arguments.
``run_to_exit`` runs one program to the exit of its whole tree and returns what it printed
(``Finished``), for a test that drives a command. ``processes_naming`` finds live processes by
what they name (Linux), without reading any of dsh's own markers or records. ``pytest_argv``
is the argv of a pytest run in a child process, for a test that runs tests; ``python_argv`` the
argv of a child program written in the test as an indented block.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from dsh.subprocess._marker import parse_marker
from dsh.subprocess._orphans import marked_processes
from dsh.subprocess._procfs import TREE_MARKER_ENV, live_thread, scan
from dsh.subprocess._runtime import default_runtime
from dsh.subprocess._spawner import SPAWNER_SCRIPT_NAME
from dsh.subprocess._spec import Collect, SpawnSpec

__all__ = [
    "Finished",
    "SessionProcesses",
    "check_no_leaks",
    "describe_processes",
    "processes_naming",
    "pytest_argv",
    "python_argv",
    "run_to_exit",
    "spawner_processes",
]

_START_TOLERANCE_S = 1.0
_COLLECT_BYTES = 1 << 16


@dataclass(frozen=True, slots=True)
class Finished:
    """How a program run by :func:`run_to_exit` ended: its exit code (``None`` when a signal
    ended it), the text it printed (the last 64 KiB of each stream) and its pid."""

    exit_code: int | None
    stdout: str
    stderr: str
    pid: int


async def run_to_exit(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str | None] | None = None,
    timeout_s: float | None = None,
) -> Finished:
    """Spawn ``argv`` on the default runtime, wait (at most ``timeout_s``; ``TimeoutError``
    past it) until its whole tree has exited, and close it, also when the wait fails."""
    spec = SpawnSpec(
        argv=argv,
        cwd=cwd,
        env=env or {},
        stdout=Collect(_COLLECT_BYTES),
        stderr=Collect(_COLLECT_BYTES),
    )
    proc = await default_runtime().spawn(spec)
    try:
        async with asyncio.timeout(timeout_s):
            outcome = await proc.wait()
    finally:
        await proc.aclose()
    out, err = proc.collected("stdout").text, proc.collected("stderr").text
    return Finished(outcome.exit_code, out, err, proc.pid)


def python_argv(program: str, *args: str) -> list[str]:
    """The argv of this interpreter running ``program`` with ``args`` (``sys.argv[1:]``).

    ``program`` is dedented first, so a test writes its child as an indented triple-quoted block
    that reads as the Python it is."""
    return [sys.executable, "-c", textwrap.dedent(program), *args]


def pytest_argv(*args: str) -> list[str]:
    """The argv of ``pytest *args`` run by this interpreter: quiet, without the cache provider
    and without the plugins of this workspace that such a run never uses (hypothesis and
    langsmith take about 1.5 s to import; pytest-randomly would reorder the inner tests)."""
    plugins = ("cacheprovider", "hypothesispytest", "langsmith_plugin", "randomly")
    disabled = [arg for plugin in plugins for arg in ("-p", f"no:{plugin}")]
    return [sys.executable, "-m", "pytest", "-q", *disabled, *args]


def describe_processes(pids: list[int]) -> list[str]:
    """One line per pid; a pid that is gone by now says so.

    A process whose main thread has exited while others run is described from a live thread,
    and its state is shown as ``half-exited``.
    """
    lines = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                status = proc.status()
                if status == psutil.STATUS_ZOMBIE:
                    tid = live_thread(pid)
                    if tid is None:
                        lines.append(f"{pid} (gone)")
                        continue
                    status = "half-exited"
                    command, marker = _from_thread(pid, tid)
                else:
                    command = " ".join(proc.cmdline()[:4])[:160]
                    marker = proc.environ().get(TREE_MARKER_ENV, "?")
                lines.append(
                    f"{pid} {proc.name()} [{status}] ppid={proc.ppid()} "
                    f"pgid={os.getpgid(pid)} sid={os.getsid(pid)} marker={marker} cmd={command}"
                )
        except (psutil.Error, OSError):
            lines.append(f"{pid} (gone)")
    return lines


def processes_naming(needle: str) -> list[int]:
    """Live, non-zombie pids (this process left out) whose command line, environment or working
    directory holds ``needle``: a walk of ``/proc`` that reads no dsh marker or record."""
    found = []
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit() or int(pid_dir.name) == os.getpid():
            continue
        try:
            state = (pid_dir / "stat").read_text().rpartition(")")[2].split()[0]
            texts = [
                (pid_dir / "cmdline").read_bytes().decode(errors="replace"),
                (pid_dir / "environ").read_bytes().decode(errors="replace"),
                str((pid_dir / "cwd").readlink()),
            ]
        except (OSError, IndexError):
            continue
        if state != "Z" and any(needle in text for text in texts):
            found.append(int(pid_dir.name))
    return found


def _from_thread(pid: int, tid: int) -> tuple[str, str]:
    base = Path(f"/proc/{pid}/task/{tid}")
    argv = base.joinpath("cmdline").read_bytes().split(b"\0")
    command = " ".join(part.decode(errors="replace") for part in argv[:4])[:160]
    marker = "?"
    for item in base.joinpath("environ").read_bytes().split(b"\0"):
        name, _, value = item.partition(b"=")
        if name == TREE_MARKER_ENV.encode():
            marker = value.decode(errors="replace")
    return command, marker


def spawner_processes(owner_pid: int | None = None) -> list[int]:
    """Pids of dsh.subprocess's spawner and supervisors (of ``owner_pid``'s spawner if given).

    They are infrastructure, not tree members: a check for leftover children of a host that is
    still running should leave them out (they exit once the host does).
    """
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        argv = proc.info["cmdline"] or []
        ours = owner_pid is None or (argv[-1:] and argv[-1].split(":", 1)[0] == str(owner_pid))
        if len(argv) >= 3 and argv[-3].endswith(SPAWNER_SCRIPT_NAME) and ours:
            found.append(proc.pid)
    return sorted(found)


def _created_from_ticks(field: str) -> float | None:
    """The create time (as psutil gives it) that an owned dir's ``<start ticks>`` field names;
    None when the name carries none. Without it a reused pid would blame a stranger's dir."""
    if not field.isdigit():
        return None
    boot: float = psutil.boot_time()
    return boot + int(field) / os.sysconf("SC_CLK_TCK")


class SessionProcesses:
    """Which processes belong to one test session: its own process and every process it spawned.

    A background thread samples the session's descendants, so a ``dsh`` command a test ran and
    that has exited since is still known as the session's by (pid, start time). Leftovers of a
    host that is not the session's (a SIGKILLed run from before, another suite, a user's own
    ``dsh`` run) are never counted. Limit: a child that lived less than one sampling period and
    was not the owner of anything still alive at the check is not seen (it made nothing to find).
    """

    def __init__(self, period_s: float = 0.05) -> None:
        me = psutil.Process()
        self.pid = me.pid
        self.started = time.time()
        self._known: dict[int, float] = {me.pid: me.create_time()}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(period_s,), daemon=True)
        self._thread.start()

    def _run(self, period_s: float) -> None:
        while not self._stop.wait(period_s):
            self.sample()

    def sample(self) -> None:
        """Record the session's live descendants now."""
        try:
            children = psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            with contextlib.suppress(psutil.Error):
                created = child.create_time()
                with self._lock:
                    self._known.setdefault(child.pid, created)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def owns(self, pid: int, created: float | None = None) -> bool:
        """True if ``pid`` (started at ``created``, when given) is or was one of the session's."""
        with self._lock:
            seen = self._known.get(pid)
        if seen is None:
            return False
        return created is None or abs(seen - created) <= _START_TOLERANCE_S

    def marked(self) -> list[int]:
        """Live marked processes whose marker's owner is the session's, or that descend from it."""
        self.sample()
        live = marked_processes()
        markers = scan(0.0, full=True).markers
        found = []
        for pid in live:
            owner = parse_marker(markers.get(pid, ""))
            if (owner is not None and self.owns(*owner)) or self.owns(pid):
                found.append(pid)
        return found

    def temp_dirs(self, since: set[str] | None = None) -> set[str]:
        """``dsh-<product>-<pid>-*`` dirs of the session's pids, and unowned ``claude-*`` dirs.

        The product's own ``claude-*`` scratch dirs name no owner: they count only if absent
        from ``since`` (a snapshot taken when the check's scope began), so a concurrent Claude
        Code run that leaves one during that scope is blamed on the session (documented limit).
        """
        self.sample()
        found = set()
        for path in Path(tempfile.gettempdir()).glob("dsh-*-*-*"):
            parts = path.name.split("-")
            if parts[2].isdigit() and self.owns(int(parts[2]), _created_from_ticks(parts[3])):
                found.add(path.name)
        if since is not None:
            found |= {p.name for p in Path(tempfile.gettempdir()).glob("claude-*")} - since
        return found

    def unowned_snapshot(self) -> set[str]:
        """The ``claude-*`` dirs present now (the baseline for :meth:`temp_dirs`)."""
        return {p.name for p in Path(tempfile.gettempdir()).glob("claude-*")}


def check_no_leaks(
    session: SessionProcesses,
    *,
    before_dirs: set[str],
    before_unowned: set[str],
    already: Collection[int] = (),
    settle_s: float = 0.0,
    what: str = "test",
) -> None:
    """Raise AssertionError if the session left a marked process or a temp dir behind.

    ``settle_s`` only absorbs reaping latency: a tree that is still alive after it counts.
    """
    deadline = time.monotonic() + settle_s
    while True:
        leaked = sorted(set(session.marked()) - set(already))
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not leaked, (
        f"processes carrying a dsh tree marker outlived the {what}: {describe_processes(leaked)}"
    )
    new_dirs = sorted(session.temp_dirs(before_unowned) - before_dirs)
    assert not new_dirs, f"temporary dirs outlived the {what}: {new_dirs}"
