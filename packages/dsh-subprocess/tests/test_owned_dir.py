"""``SpawnSpec.owned_dir``: removed once the whole tree is gone, by whoever can prove it gone."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from dsh.subprocess import SpawnError, SpawnSpec, SubprocessRuntime, marked_processes
from dsh.subprocess import _owned_dir as owned_dir_module
from dsh.subprocess import _process as process_module
from dsh.subprocess import _spawn as spawn_module

pytestmark = [pytest.mark.linux_only, pytest.mark.timeout(60)]

# Leaves an escapee that writes into the owned dir after a moment, well inside the grace.
LATE_WRITER = Path(__file__).parent / "programs" / "escapee.py"


def present(path: Path) -> bool:
    return path.exists()


@pytest.fixture
def owned(tmp_path: Path) -> Path:
    path = tmp_path / "owned"
    path.mkdir()
    (path / "script.sh").write_text("unset X\n")
    (path / "script.sh").chmod(0o400)
    (path / "sub").mkdir()
    return path


@pytest.fixture
def host_removals(record_calls: Any) -> list[str]:
    """The removals the host's own process ran (each still really removes)."""
    real = owned_dir_module.remove_owned_dir
    removals: list[str] = record_calls(process_module, "remove_owned_dir", real, str)
    return removals


async def _spawn_late_writer(
    runtime: SubprocessRuntime, owned: Path
) -> process_module.ManagedProcess:
    proc = await runtime.spawn(
        SpawnSpec(
            [sys.executable, str(LATE_WRITER), str(owned)], owned_dir=str(owned), grace_ms=5000
        )
    )
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"forked\n"
    return proc


async def test_the_supervisor_removes_it_after_the_whole_tree(
    runtime: SubprocessRuntime, owned: Path, host_removals: list[str]
) -> None:
    proc = await _spawn_late_writer(runtime, owned)
    assert proc._supervised is not None
    await proc.wait()
    assert present(owned), "removed while the tree was still running"
    await proc.aclose()
    assert marked_processes(proc.tree_id) == []
    assert not present(owned)
    assert proc._supervised.empty  # the supervisor reported the end, after its removal
    assert host_removals == []  # and the host's process did no filesystem work for it


async def test_without_a_supervisor_aclose_removes_it(
    runtime: SubprocessRuntime,
    owned: Path,
    host_removals: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(spawn_module, "_SUPERVISED", False)
    proc = await _spawn_late_writer(runtime, owned)
    assert proc._supervised is None
    await proc.aclose()
    assert not present(owned)
    assert host_removals == [str(owned)]


async def test_a_killed_supervisor_leaves_it_to_the_host(
    runtime: SubprocessRuntime, owned: Path, host_removals: list[str]
) -> None:
    code = "import time\nprint('ready', flush=True)\ntime.sleep(30)\n"
    proc = await runtime.spawn(SpawnSpec([sys.executable, "-c", code], owned_dir=owned))
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"ready\n"
    supervisor = proc._supervised
    assert supervisor is not None
    os.kill(supervisor.supervisor_pid, signal.SIGKILL)  # what a hostile tool could do
    await proc.aclose()
    assert marked_processes(proc.tree_id) == []
    assert supervisor.lost
    assert not present(owned)
    assert host_removals == [str(owned)]


async def test_a_cancelled_aclose_still_removes_it(
    runtime: SubprocessRuntime, owned: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spawn_module, "_SUPERVISED", False)
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    spec = SpawnSpec([sys.executable, "-c", code], owned_dir=owned, grace_ms=5000)
    proc = await runtime.spawn(spec)
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"ready\n"
    closing = asyncio.ensure_future(proc.aclose())
    await asyncio.sleep(0.2)
    assert not closing.done()  # waiting out the grace: the child ignores SIGTERM
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert marked_processes(proc.tree_id) == []
    assert not present(owned)


@pytest.mark.parametrize("supervised", [True, False])
async def test_a_failed_spawn_removes_it(
    runtime: SubprocessRuntime,
    owned: Path,
    supervised: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(spawn_module, "_SUPERVISED", supervised)
    with pytest.raises(SpawnError, match="executable not found"):
        await runtime.spawn(SpawnSpec(["/nonexistent/program"], owned_dir=owned))
    assert not present(owned)


async def test_a_closed_runtime_removes_it(owned: Path) -> None:
    runtime = SubprocessRuntime()
    await runtime.aclose()
    with pytest.raises(SpawnError, match="runtime is closed"):
        await runtime.spawn(SpawnSpec(["true"], owned_dir=owned))
    assert not present(owned)


async def test_a_tree_that_ends_by_itself_removes_it_before_aclose_returns(
    runtime: SubprocessRuntime, owned: Path
) -> None:
    proc = await runtime.spawn(SpawnSpec(["true"], owned_dir=owned))
    assert (await proc.wait()).exit_code == 0
    started = time.monotonic()
    await proc.aclose()
    assert not present(owned)
    assert time.monotonic() - started < 5.0


@pytest.mark.parametrize("value", ["relative/dir", b"/bytes/path", 3])
def test_owned_dir_must_be_an_absolute_path(value: object) -> None:
    with pytest.raises(ValueError, match="owned_dir must be an absolute path"):
        SpawnSpec(["true"], owned_dir=value)  # type: ignore[arg-type]
