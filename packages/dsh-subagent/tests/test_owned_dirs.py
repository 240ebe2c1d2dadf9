"""Owner-named run dirs (``dsh.subagent.kit``): names, the template copy, cancel-safe creation."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dsh.subagent import kit


def test_the_prefix_names_this_process_and_its_start_time() -> None:
    prefix = kit.owned_dir_prefix("codex")
    pid, ticks = prefix.removeprefix("dsh-codex-").rstrip("-").split("-")
    assert int(pid) == os.getpid()
    stat = Path("/proc/self/stat").read_bytes()
    assert int(ticks) == int(stat[stat.rindex(b")") + 2 :].split()[19])
    with pytest.raises(ValueError, match="tag"):
        kit.owned_dir_prefix("../x")


def test_a_dir_whose_owner_runs_is_kept_and_a_dead_owners_is_swept(tmp_path: Path) -> None:
    mine = tmp_path / (kit.owned_dir_prefix("codex") + "abc")
    mine.mkdir()
    dead = tmp_path / "dsh-codex-999999999-1-abc"  # no such pid
    dead.mkdir()
    other_tag = tmp_path / "dsh-claude-999999999-1-abc"
    other_tag.mkdir()
    assert kit.sweep_lost_dirs("codex", tmp_path) == [dead.name]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, other_tag.name])


def test_the_template_is_copied_never_linked(tmp_path: Path) -> None:
    outside = tmp_path / "outside.toml"
    outside.write_text("model = 'x'\n")
    template = tmp_path / "template"
    (template / "sub").mkdir(parents=True)
    (template / "sub" / "settings.json").write_text("{}")
    (template / "config.toml").symlink_to(outside)
    home = tmp_path / "home"
    home.mkdir()
    kit.copy_home_template(str(template), home)
    copied = home / "config.toml"
    assert not copied.is_symlink()
    assert copied.read_text() == "model = 'x'\n"
    assert (home / "sub" / "settings.json").read_text() == "{}"
    copied.write_text("changed")
    assert outside.read_text() == "model = 'x'\n"
    kit.copy_home_template(None, home)  # no template: nothing copied, nothing fails


async def test_a_cancelled_creation_leaves_no_dir(tmp_path: Path) -> None:
    release = threading.Event()
    made: list[Path] = []

    def make() -> str:
        path = tmp_path / "made"
        path.mkdir()
        made.append(path)
        release.wait(5)
        return str(path)

    task = asyncio.ensure_future(kit.make_off_loop(make, lambda p: p))
    while not made:  # noqa: ASYNC110 - bounded by the test timeout
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    async with asyncio.timeout(5):
        while made[0].exists():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def test_a_removal_queued_behind_busy_workers_survives_its_callers_cancellation(
    tmp_path: Path,
) -> None:
    doomed = tmp_path / "run-dir"
    (doomed / "scratch").mkdir(parents=True)
    loop = asyncio.get_running_loop()
    release = threading.Event()
    # The only default-executor worker is busy, so the removal waits in the queue when cancelled.
    loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
    blockers = [loop.run_in_executor(None, release.wait, 10.0)]
    remover = asyncio.ensure_future(kit.remove_off_loop(str(doomed)))
    await asyncio.sleep(0.05)
    assert doomed.exists()  # still queued
    remover.cancel()
    with pytest.raises(asyncio.CancelledError):
        await remover
    release.set()
    await asyncio.gather(*blockers)
    for _ in range(100):
        if not doomed.exists():
            break
        await asyncio.sleep(0.02)
    assert not doomed.exists()


def test_a_dir_made_for_a_caller_whose_loop_shut_down_is_removed(tmp_path: Path) -> None:
    made: list[Path] = []
    release = threading.Event()

    def make() -> str:
        path = tmp_path / "made"
        path.mkdir()
        made.append(path)
        release.wait(5)
        (path / "env.sh").write_text("unset X\n")
        return str(path)

    async def main() -> None:
        # The caller is still waiting when the loop ends: asyncio.run cancels it on the way out.
        asyncio.get_running_loop().create_task(kit.make_off_loop(make, lambda p: p))
        while not made:  # noqa: ASYNC110 - bounded by make's own wait
            await asyncio.sleep(0.01)

    def release_soon() -> None:
        time.sleep(0.2)
        release.set()

    with ThreadPoolExecutor(max_workers=1) as spare:
        finish = spare.submit(release_soon)
        asyncio.run(main())
        finish.result()
    deadline = time.monotonic() + 5
    while made[0].exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not made[0].exists()
