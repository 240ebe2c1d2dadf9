"""The sweep of run dirs whose owner is gone: real owner processes, one SIGKILLed, one alive."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from dsh.subagent_claude_code._run_dirs import run_dir_prefix, sweep_lost_run_dirs
from dsh.subprocess import ManagedProcess, SpawnSpec, default_runtime

#: An owner: makes its run dir as a run does, prints its path, then waits to be killed.
OWNER = (
    "from dsh.subagent_claude_code._env import make_run_dir;"
    "from dsh.subagent_claude_code.config import ClaudeCodeProviderConfig;"
    "import time; print(make_run_dir(ClaudeCodeProviderConfig())[0], flush=True); time.sleep(60)"
)


async def start_owner(tmp: Path) -> tuple[ManagedProcess, Path]:
    spec = SpawnSpec(argv=[sys.executable, "-c", OWNER], env={"TMPDIR": str(tmp)}, stdout="pipe")
    owner = await default_runtime().spawn(spec)
    assert owner.stdout is not None
    async with asyncio.timeout(30):
        line = await owner.stdout.readline()
    return owner, Path(line.decode().strip())


async def test_a_dead_owners_dir_is_removed_and_a_live_owners_dir_is_kept(tmp_path: Path) -> None:
    killed, lost = await start_owner(tmp_path)
    alive, kept = await start_owner(tmp_path)
    try:
        assert lost.parent == kept.parent == tmp_path
        assert lost.name.startswith(f"dsh-claude-{killed.pid}-")
        os.kill(killed.pid, signal.SIGKILL)
        async with asyncio.timeout(30):
            await killed.wait()
        assert lost.is_dir()  # a SIGKILLed owner cannot remove its dir
        assert sweep_lost_run_dirs(tmp_path) == [lost.name]
        assert not lost.exists()
        assert kept.is_dir()
        assert (kept / "dsh-tool-env.sh").is_file()
    finally:
        await killed.aclose()
        await alive.aclose()
    # Once its owner is gone too, that dir goes as well.
    assert sweep_lost_run_dirs(tmp_path) == [kept.name]


def test_only_this_users_dirs_of_the_exact_pattern_are_swept(tmp_path: Path) -> None:
    mine = run_dir_prefix()
    pid, ticks = mine.split("-")[2:4]
    dead_pid = 4_194_304 + 1  # above the kernel's pid_max: no such process
    own = tmp_path / f"{mine}abc"  # this live process's: kept
    reused = tmp_path / f"dsh-claude-{pid}-{int(ticks) + 1}-abc"  # same pid, other start: gone
    dead = tmp_path / f"dsh-claude-{dead_pid}-5-abc"
    old_style = tmp_path / f"dsh-claude-{dead_pid}-abc"  # no start time: never swept
    other_name = tmp_path / f"dsh-codex-{dead_pid}-5-abc"
    a_file = tmp_path / f"dsh-claude-{dead_pid}-6-abc"
    for path in (own, reused, dead, old_style, other_name):
        path.mkdir()
        (path / "inside").write_text("x")
    a_file.write_text("not a dir")
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / f"dsh-claude-{dead_pid}-7-abc"
    link.symlink_to(target)
    kept = {own.name, old_style.name, other_name.name, a_file.name, "target", link.name}
    if os.getuid() == 0:  # as root (CI), a dir of another user can be made: it is kept
        foreign = tmp_path / f"dsh-claude-{dead_pid}-8-abc"
        foreign.mkdir()
        os.chown(foreign, 65534, 65534)
        kept.add(foreign.name)
    assert sweep_lost_run_dirs(tmp_path) == sorted([reused.name, dead.name])
    assert {p.name for p in tmp_path.iterdir()} == kept
    assert target.is_dir()
