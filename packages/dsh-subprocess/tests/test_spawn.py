from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dsh.subprocess import (
    MAX_GRACE_MS,
    Collect,
    SpawnError,
    SpawnSpec,
    SubprocessRuntime,
    default_runtime,
)
from dsh.subprocess import _spawn as spawn_module
from dsh.subprocess.testing import describe_processes

ARGV_MSG = "invalid argv: expected a non-empty program name at argv[0]"
GRACE_MSG = "grace_ms must be a positive finite number no greater than 2147483647"


@pytest.mark.parametrize("argv", [[], [""], ["   "], ()])
def test_bad_argv(argv: list[str]) -> None:
    with pytest.raises(SpawnError) as info:
        SpawnSpec(argv)
    assert str(info.value) == ARGV_MSG


@pytest.mark.parametrize("grace", [0, -1.0, float("nan"), float("inf"), MAX_GRACE_MS + 1])
def test_bad_grace(grace: float) -> None:
    with pytest.raises(ValueError, match=r"^grace_ms must") as info:
        SpawnSpec(["x"], grace_ms=grace)
    assert str(info.value) == GRACE_MSG


def test_max_grace_accepted() -> None:
    assert SpawnSpec(["x"], grace_ms=MAX_GRACE_MS).grace_ms == MAX_GRACE_MS


async def test_missing_executable(runtime: SubprocessRuntime) -> None:
    spec = SpawnSpec(["/definitely/missing/prog"], env={"SECRET_X": "hunter2-value"})
    with pytest.raises(SpawnError) as info:
        await runtime.spawn(spec)
    assert "executable" in str(info.value)
    assert "hunter2" not in str(info.value)
    assert info.value.__cause__ is not None


@pytest.mark.parametrize("supervised", [True, False])
async def test_bad_cwd(
    runtime: SubprocessRuntime, tmp_path: Path, supervised: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reported by the program's own start (no stat beforehand), on either path.
    monkeypatch.setattr(spawn_module, "_SUPERVISED", supervised)
    with pytest.raises(SpawnError, match="cwd does not exist"):
        await runtime.spawn(SpawnSpec([sys.executable, "-c", ""], cwd=tmp_path / "nope"))
    afile = tmp_path / "f"
    afile.write_text("x")
    with pytest.raises(SpawnError, match="cwd is not a directory"):
        await runtime.spawn(SpawnSpec([sys.executable, "-c", ""], cwd=afile))


async def test_collect_truncation(runtime: SubprocessRuntime) -> None:
    code = "import sys; sys.stdout.write('a' * 10000 + 'END')"
    proc = await runtime.spawn(SpawnSpec([sys.executable, "-c", code], stdout=Collect(100)))
    await proc.wait()
    got = proc.collected("stdout")
    assert got.truncated
    assert got.text == "a" * 97 + "END"
    small = await runtime.spawn(
        SpawnSpec([sys.executable, "-c", "print('hi')"], stdout=Collect(100))
    )
    await small.wait()
    assert small.collected("stdout").text == "hi\n"
    assert not small.collected("stdout").truncated


async def test_stdin_bytes_and_epipe(runtime: SubprocessRuntime) -> None:
    code = "import sys; print(len(sys.stdin.buffer.read()))"
    data = b"x" * 300_000
    proc = await runtime.spawn(
        SpawnSpec([sys.executable, "-c", code], stdin=data, stdout=Collect(64))
    )
    assert (await proc.wait()).exit_code == 0
    assert proc.collected("stdout").text.strip() == str(len(data))
    early = await runtime.spawn(SpawnSpec([sys.executable, "-c", "pass"], stdin=data * 10))
    assert (await early.wait()).exit_code == 0
    await early.aclose()


async def test_outcome_signal_name(runtime: SubprocessRuntime) -> None:
    proc = await runtime.spawn(
        SpawnSpec([sys.executable, "-c", "import os; os.abort()"], stderr="ignore")
    )
    outcome = await proc.wait()
    assert (outcome.exit_code, outcome.signal) == (None, "SIGABRT")
    exit7 = await runtime.spawn(SpawnSpec([sys.executable, "-c", "raise SystemExit(7)"]))
    assert (await exit7.wait()).exit_code == 7


async def test_marked_processes_filters_by_tree_and_owner(runtime: SubprocessRuntime) -> None:
    import os

    from dsh.subprocess import marked_processes

    sleeper = SpawnSpec([sys.executable, "-c", "import time; time.sleep(30)"], grace_ms=300)
    proc = await runtime.spawn(sleeper)
    try:
        assert proc.pid in marked_processes(proc.tree_id)
        assert proc.pid in marked_processes(owner_pid=os.getpid())
        assert proc.pid not in marked_processes(owner_pid=os.getpid() + 1_000_000)
        assert proc.pid not in marked_processes("not-a-marker")
    finally:
        await proc.aclose()
    assert marked_processes(proc.tree_id) == []


async def test_marked_processes_filters_by_env_values(runtime: SubprocessRuntime) -> None:
    from dsh.subprocess import marked_processes

    argv = [sys.executable, "-c", "import time; time.sleep(30)"]
    tagged = await runtime.spawn(SpawnSpec(argv, env={"DSH_T_TAG": "a", "OTHER": "x"}))
    other = await runtime.spawn(SpawnSpec(argv, env={"DSH_T_TAG": "b"}))
    try:
        assert marked_processes(env={"DSH_T_TAG": "a"}) == [tagged.pid]
        assert marked_processes(env={"DSH_T_TAG": "a", "OTHER": "x"}) == [tagged.pid]
        assert marked_processes(env={"DSH_T_TAG": "a", "OTHER": "y"}) == []
        assert marked_processes(env={"DSH_T_TAG": "b"}) == [other.pid]
    finally:
        await tagged.aclose()
        await other.aclose()
    assert marked_processes(env={"DSH_T_TAG": "a"}) == []


async def test_describe_processes_names_what_leaked() -> None:
    proc = await default_runtime().spawn(
        SpawnSpec(argv=[sys.executable, "-c", "import time; time.sleep(30)"], stdin="ignore")
    )
    try:
        [line] = describe_processes([proc.pid])
        assert line.startswith(f"{proc.pid} ")
        assert f"marker={proc.tree_id} " in line
        assert "time.sleep(30)" in line
    finally:
        await proc.aclose()
    assert describe_processes([proc.pid]) == [f"{proc.pid} (gone)"]
