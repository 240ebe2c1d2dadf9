"""``dsh jobs`` and ``dsh run --detach`` over the job store, with no product.

The verbs read records that a registry in this process wrote (plain works, no product), and the
store's bad inputs are refused before anything is spawned, with a line naming the store's path
and what to do, leaving a readable store's bytes unchanged.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from dsh.jobs import (
    HOLDER_GONE_DETAIL,
    Holder,
    JobOutcome,
    JobRegistry,
    JobsConfig,
    JobStatus,
    SqliteJobStore,
)
from dsh.jobs import _sqlite_store as sqlite_store
from dsh.tool_subagent import _cli, _detached


class Owner:
    session_id = "dsh-cli"


def profile(tmp_path: Path, store: Path, extra: str = "") -> Path:
    path = tmp_path / "profile.toml"
    path.write_text(f"[jobs]\nstore = {json.dumps(str(store))}\n{extra}", encoding="utf-8")
    return path


async def finished_jobs(store: Path) -> dict[str, str]:
    """Three settled jobs in ``store``: completed, failed and one whose holder is gone."""
    registry = JobRegistry(JobsConfig(store=str(store)))

    async def answer() -> JobOutcome:
        return JobOutcome(
            JobStatus.COMPLETED,
            output="the answer",
            meta={"usage": {"n": 1}, "workspace": {"branch": "dsh/x"}},
        )

    async def fail() -> JobOutcome:
        return JobOutcome(JobStatus.FAILED, detail="error", output="partial")

    async with registry:
        done = registry.start("subagent", "answers", Owner(), answer)
        failed = registry.start("subagent", "fails", Owner(), fail)
        await registry.join(done)
        await registry.join(failed)
    writer = SqliteJobStore(store)
    lost = "subagent-00000000dead"
    record = writer.get(done)
    assert record is not None
    from dataclasses import replace

    gone = Holder(2**22 + 7, 1)  # no such process
    writer.insert(
        replace(
            record,
            id=lost,
            status=JobStatus.RUNNING,
            finished_at=None,
            output="",
            holder=gone,
            label="lost",
        )
    )
    writer.close()
    return {"done": done, "failed": failed, "lost": lost}


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = _cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def test_the_verbs_read_show_and_correct_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "jobs.sqlite3"
    ids = await finished_jobs(store)
    p = str(profile(tmp_path, store))

    code, out, _ = await asyncio.to_thread(run, ["jobs", "list", "--json", "--profile", p], capsys)
    assert code == 0
    listed = {job["job_id"]: job for job in json.loads(out)["jobs"]}
    assert set(listed) == set(ids.values())
    # The record whose holder is gone reads failed with the fixed detail, and stays so.
    assert (listed[ids["lost"]]["status"], listed[ids["lost"]]["detail"]) == (
        "failed",
        HOLDER_GONE_DETAIL,
    )
    code, out, _ = await asyncio.to_thread(
        run, ["jobs", "show", ids["done"], "--json", "--profile", p], capsys
    )
    shown = json.loads(out)
    assert (code, shown["status"], shown["usage"]) == (0, "completed", {"n": 1})
    assert shown["workspace"] == {"branch": "dsh/x"}  # a worktree run's facts
    assert await asyncio.to_thread(
        run, ["jobs", "output", ids["done"], "--profile", p], capsys
    ) == (0, "the answer\n", "")
    code, out, err = await asyncio.to_thread(
        run, ["jobs", "output", ids["failed"], "--profile", p], capsys
    )
    assert (code, out, err) == (1, "", "partial\n[status: failed, error]\n")
    code, out, _ = await asyncio.to_thread(
        run, ["jobs", "kill", ids["done"], "--profile", p], capsys
    )
    assert (code, out) == (0, f"job {ids['done']} had already finished [status: completed]\n")
    code, _, err = await asyncio.to_thread(
        run, ["jobs", "show", "subagent-1", "--profile", p], capsys
    )
    assert (code, err) == (2, "dsh jobs: unknown job subagent-1\n")
    code, out, _ = await asyncio.to_thread(run, ["jobs", "prune", "--json", "--profile", p], capsys)
    assert code == 0
    assert json.loads(out)["removed"] == 0
    again = SqliteJobStore(store)
    try:
        lost = again.get(ids["lost"])
        assert lost is not None
        assert (lost.status, lost.detail) == (JobStatus.FAILED, HOLDER_GONE_DETAIL)
    finally:
        again.close()


def content(path: Path) -> object:
    """What a store holds: its rows and version marks when SQLite can read it (closing a WAL
    database checkpoints it, which rewrites header bytes), else its bytes."""
    if not path.is_file():
        return None
    try:
        with sqlite3.connect(path) as connection:
            marks = [
                connection.execute(f"PRAGMA {n}").fetchone()[0]
                for n in ("user_version", "application_id")
            ]
            return marks, list(connection.iterdump())
    except sqlite3.DatabaseError:
        return path.read_bytes()


def _newer(path: Path) -> None:
    SqliteJobStore(path).close()
    with sqlite3.connect(path) as connection:
        connection.execute(f"PRAGMA user_version = {sqlite_store.SCHEMA_VERSION + 1}")


def _not_a_database(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 20)


def _another_programs(path: Path) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE notes (text TEXT)")
        connection.execute("INSERT INTO notes VALUES ('keep me')")


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (None, "cannot create it (Not a directory)"),
        (_not_a_database, "the file is not a SQLite database; move it away"),
        (_another_programs, "the file is another program's SQLite database; move it away"),
        (_newer, "written by a newer dsh (schema 2; this dsh reads up to 1); upgrade dsh"),
    ],
)
def test_an_unusable_store_is_refused_before_anything_starts(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    make: Any,
    says: str,
) -> None:
    if make is None:
        (tmp_path / "a-file").write_text("x")
        store = tmp_path / "a-file" / "jobs.sqlite3"
    else:
        store = tmp_path / "jobs.sqlite3"
        make(store)
    before = content(store)
    spawned: list[object] = []
    monkeypatch.setattr(_detached, "spawn_detached", lambda *a, **k: spawned.append(a))
    p = str(profile(tmp_path, store))
    for argv in (["run", "--profile", p, "--detach", "task"], ["jobs", "list", "--profile", p]):
        code, out, err = run(argv, capsys)
        assert (code, out) == (2, "")
        assert f"job store {store}: {says}" in err
        assert 'set [jobs] store to another path, or "memory"' in err
    assert spawned == []
    assert content(store) == before


def test_a_store_held_by_a_stuck_writer_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "jobs.sqlite3"
    SqliteJobStore(store).close()
    monkeypatch.setattr(sqlite_store, "OPEN_BUSY_S", 0.2)
    stuck = sqlite3.connect(store, isolation_level=None)
    stuck.execute("BEGIN IMMEDIATE")
    try:
        code, _, err = run(
            ["run", "--profile", str(profile(tmp_path, store)), "--detach", "t"], capsys
        )
    finally:
        stuck.execute("ROLLBACK")
        stuck.close()
    assert code == 2
    assert f"job store {store}: another process has held its write lock" in err
    assert "stop that process" in err


def test_detach_needs_a_file_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "profile.toml"
    path.write_text('[jobs]\nstore = "memory"\n', encoding="utf-8")
    code, _, err = run(["run", "--profile", str(path), "--detach", "task"], capsys)
    assert code == 2
    assert 'jobs.store: a detached job needs a file store, not "memory"' in err
