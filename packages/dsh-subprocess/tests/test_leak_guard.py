"""The shared leak guard fails a session's own leak and ignores a dead foreign host's leftovers.

Each case runs pytest in a child process on a small test file whose conftest enables the guard
exactly as a third party would, so the guard is the real plugin, not a copy.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from dsh.subprocess.testing import SessionProcesses, pytest_argv

_CONFTEST = "from dsh.subprocess.pytest_plugin import dsh_leak_guard, dsh_session  # noqa: F401\n"

_LEAKS = textwrap.dedent(
    """
    import asyncio
    from dsh.subprocess import SpawnSpec, SubprocessRuntime, marked_processes

    def test_leaks_a_tree():
        async def spawn():
            await SubprocessRuntime().spawn(SpawnSpec(["sleep", "60"]))  # never closed

        asyncio.run(spawn())
        assert marked_processes()  # the tree is alive when the guard looks
    """
)

_PLANTED_SEEN = textwrap.dedent(
    """
    import os, signal, psutil, pytest
    from pathlib import Path
    from dsh.subprocess import marked_processes

    @pytest.fixture(scope="session", autouse=True)
    def witness():
        # Torn down after the per-test guard: the leftovers were there when the guard looked.
        yield
        planted = int(os.environ["PLANTED_PID"])
        if planted not in marked_processes() or not Path(os.environ["PLANTED_DIR"]).is_dir():
            pytest.fail("LEFTOVER-REAPED")  # dsh's orphan reaper (any dsh process) won the race

    def test_makes_nothing():
        if os.environ.get("KILL_HOST_PID"):  # a concurrent dsh run dies during this session
            os.kill(int(os.environ["KILL_HOST_PID"]), signal.SIGKILL)
    """
)

# A dsh host under a parent that reaps it once killed (as a shell would): puts a process with the
# host's own tree marker in a new session, then waits to be killed.
_HOST = textwrap.dedent(
    """
    import os, sys, uuid, psutil
    from dsh.subprocess import TREE_MARKER_ENV
    from dsh.subprocess._marker import format_marker
    if pid := os.fork():
        os.waitpid(pid, 0)
        os._exit(0)
    me = psutil.Process()
    marker = format_marker(f"{me.pid}:{me.create_time():.3f}", uuid.uuid4().hex)
    child = psutil.Popen(["sleep", "120"], env={**os.environ, TREE_MARKER_ENV: marker},
                         start_new_session=True)
    print(me.pid, child.pid, flush=True)
    sys.stdin.read()
    """
)


def _run_pytest(tmp_path: Path, body: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    (tmp_path / "conftest.py").write_text(_CONFTEST)
    (tmp_path / "test_inner.py").write_text(body)
    proc = psutil.Popen(
        pytest_argv(str(tmp_path / "test_inner.py"), "--rootdir", str(tmp_path)),
        cwd=tmp_path,
        env={**os.environ, **(env or {})},
        stdout=-1,
        stderr=-2,
    )
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out.decode(errors="replace")


def test_a_leaked_tree_of_the_session_fails_the_guard(tmp_path: Path) -> None:
    code, out = _run_pytest(tmp_path, _LEAKS)
    assert code != 0, out
    assert "1 passed" in out, out
    assert "1 error" in out, out
    assert "processes carrying a dsh tree marker outlived the test" in out, out


@contextlib.contextmanager
def _dead_host_leftovers(when: str) -> Iterator[dict[str, str]]:
    """A SIGKILLed host's marked process and its ``dsh-claude-<dead pid>-x`` dir.

    ``before``: the host was killed before the session started. ``during``: it is killed by the
    session's test (a concurrent run ending mid-session; the old e2e guard blamed the session).
    """
    launcher = psutil.Popen([sys.executable, "-c", _HOST], stdin=-1, stdout=-1)
    assert launcher.stdout is not None
    host, child = (int(part) for part in launcher.stdout.readline().split())
    home = Path(tempfile.gettempdir()) / f"dsh-claude-{host}-x"
    home.mkdir()
    env = {"PLANTED_PID": str(child), "PLANTED_DIR": str(home)}
    try:
        if when == "before":
            _kill_and_wait(host)
            launcher.wait(10)  # the host is reaped: gone, not a zombie
        else:
            env["KILL_HOST_PID"] = str(host)
        yield env
    finally:
        _kill_and_wait(host)
        launcher.wait(10)
        _kill_and_wait(child)
        with contextlib.suppress(FileNotFoundError):
            home.rmdir()


def _kill_and_wait(pid: int) -> None:
    try:
        proc = psutil.Process(pid)
        proc.kill()
        deadline = time.monotonic() + 10
        while proc.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.05)
    except psutil.NoSuchProcess:
        pass


@pytest.mark.parametrize("when", ["before", "during"])
def test_a_dead_foreign_hosts_leftovers_do_not_fail_the_guard(tmp_path: Path, when: str) -> None:
    for _ in range(3):  # any dsh process on the machine may reap the planted tree first
        with _dead_host_leftovers(when) as env:
            code, out = _run_pytest(tmp_path, _PLANTED_SEEN, env)
        if "LEFTOVER-REAPED" not in out:
            break
    assert code == 0, out
    assert "1 passed" in out, out
    assert "error" not in out, out


def _start_ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime


def test_a_dir_named_for_a_reused_pid_is_not_the_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A session pid that exited can be reused by another program's dsh host; its run dirs carry
    # the same pid but another start time, and are not the session's leak.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    session = SessionProcesses()
    try:
        me, ticks = os.getpid(), _start_ticks(os.getpid())
        ours = tmp_path / f"dsh-claude-{me}-{ticks}-abc"
        reused = tmp_path / f"dsh-claude-{me}-{ticks + 100_000}-def"
        ours.mkdir()
        reused.mkdir()
        assert session.temp_dirs() == {ours.name}
    finally:
        session.close()
