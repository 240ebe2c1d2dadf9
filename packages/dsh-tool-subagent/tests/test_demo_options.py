"""``dsh demo --executor/--address/--max-runs-per-node``: checked before anything starts, and
the demo's tag walk of ``/proc``."""

from __future__ import annotations

import asyncio
import contextlib
import io
import sys
import tomllib

import pytest
from rich.console import Console

from dsh.subprocess import SpawnSpec, default_runtime
from dsh.tool_subagent._cli import main as cli_main
from dsh.tool_subagent._demo import command as demo
from dsh.tool_subagent._demo.jobs import LOCAL_JOBS, DemoOptionError, demo_jobs
from dsh.tool_subagent._demo.serve import END_OF_PROFILE, serve
from dsh.tool_subagent._demo.walk import RUN_ENV, new_run_tag, tagged, tagged_marked_processes


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"address": "auto"}, "--address is a setting of --executor ray"),
        ({"executor": "local", "max_runs_per_node": 2}, "--max-runs-per-node is a setting of"),
        (
            {"executor": "ray", "address": "not an address"},
            '--address: must be "auto", "ray://<host>:<port>" or "<host>:<port>"',
        ),
        ({"executor": "ray", "max_runs_per_node": 0}, "--max-runs-per-node: Input should be"),
        ({"executor": "ray", "max_runs_per_node": 65}, "--max-runs-per-node: Input should be"),
    ],
)
def test_a_bad_option_is_an_error_naming_it_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, object], message: str
) -> None:
    def nothing_may_start() -> None:
        raise AssertionError("the demo started before its options were checked")

    monkeypatch.setattr(demo, "_plans", nothing_may_start)
    with pytest.raises(DemoOptionError) as raised:
        demo_jobs(**options)  # type: ignore[arg-type]
    assert str(raised.value).startswith(message)
    buffer = io.StringIO()
    assert demo.main(console=Console(file=buffer, width=300), **options) == 2  # type: ignore[arg-type]
    assert buffer.getvalue() == f"dsh demo: {raised.value}\n"


def test_the_cli_passes_the_options_and_keeps_local_as_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[dict[str, object]] = []

    def recording_main(**kwargs: object) -> int:
        seen.append(kwargs)
        return 0

    monkeypatch.setattr(demo, "main", recording_main)
    assert cli_main(["demo"]) == 0
    assert cli_main(["demo", "--executor", "ray", "--address", "auto"]) == 0
    assert cli_main(["demo", "--executor", "ray", "--max-runs-per-node", "3"]) == 0
    assert seen == [
        {"serve": False, "executor": None, "address": None, "max_runs_per_node": None},
        {"serve": False, "executor": "ray", "address": "auto", "max_runs_per_node": None},
        {"serve": False, "executor": "ray", "address": None, "max_runs_per_node": 3},
    ]
    local = demo_jobs()
    assert (local.table, local.on_ray, local.note) == (
        {"max_concurrent_jobs_per_owner": 10},
        False,
        None,
    )


async def test_the_tag_walk_finds_marked_processes_carrying_the_tag_only() -> None:
    tag, other = new_run_tag(), new_run_tag()
    config = tagged({"env": {"A": "1"}, "stderr": "discard"}, tag)
    assert config == {"env": {"A": "1", RUN_ENV: tag}, "stderr": "discard"}
    argv = [sys.executable, "-c", "import time; time.sleep(30)"]
    runtime = default_runtime()
    mine = await runtime.spawn(SpawnSpec(argv=argv, env=config["env"]))
    theirs = await runtime.spawn(SpawnSpec(argv=argv, env={RUN_ENV: other}))
    try:
        assert tagged_marked_processes(tag) == [mine.pid]
        assert tagged_marked_processes(other) == [theirs.pid]
    finally:
        await mine.aclose()
        await theirs.aclose()
    assert tagged_marked_processes(tag) == []


async def test_serve_prints_the_jobs_table_of_the_options() -> None:
    out, err = io.StringIO(), io.StringIO()
    # The table as ``demo_jobs`` builds it for ``--executor ray`` (which also needs the [ray]
    # extra, absent when this package is tested alone); ``serve`` only prints it.
    jobs = {**LOCAL_JOBS, "executor": "ray", "address": "auto", "max_runs_per_node": 3}
    server = asyncio.create_task(serve([], out, err, jobs=jobs))
    try:
        async with asyncio.timeout(10):
            while END_OF_PROFILE not in out.getvalue():  # noqa: ASYNC110 - bounded poll
                await asyncio.sleep(0.01)
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server
    profile = tomllib.loads(out.getvalue())
    assert profile["jobs"] == {
        "max_concurrent_jobs_per_owner": 10,
        "executor": "ray",
        "address": "auto",
        "max_runs_per_node": 3,
    }
