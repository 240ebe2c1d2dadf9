"""Background jobs on the Ray executor, with the REAL products on a local 3-node cluster.

The harness (this test process, the Ray driver) keeps the job records; each job's whole run
happens in an actor on one of the two worker nodes, whose products talk to the loopback model
servers in this process. Codex's key exists only in the nodes' environment (``CANARY_ENV``): the
profile names it, the fake server sees it arrive, and it never passes through Ray.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import signal
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dsh.jobs import HOLDER_GONE_DETAIL, JobsConfig, JobStatus, PortableWork, store_for
from dsh.jobs._ray_executor import RayExecutor
from dsh.subprocess import SpawnSpec, default_runtime, reap_orphans
from dsh.tool_subagent import Caller, Harness, ToolResult
from dsh.tool_subagent._demo.serve import to_toml

pytestmark = [pytest.mark.real_product, pytest.mark.timeout(240)]

CODEX = "subagent_codex"
CLAUDE = "subagent_claude_code"
DELEGATIONS = 50
LOST = "job executor failure (executor: ray; stage: executor; category: workerLost)"


async def start(harness: Harness, tool: str, prompt: str, caller: Caller) -> str:
    result = await harness.tool(tool).call(
        {"description": "ray job", "prompt": prompt, "run_in_background": True}, caller
    )
    assert not result.is_error, result.text
    assert result.value is not None
    return str(result.value["job_id"])


async def until(predicate: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def job_list(harness: Harness, caller: Caller) -> ToolResult:
    return await harness.tool("job_list").call({}, caller)


# ---- the 50 delegations --------------------------------------------------------------------


async def test_fifty_delegations_mixing_both_products_spread_over_the_worker_nodes(
    setup: Any, ray_kit: Any
) -> None:
    async with setup.harness(max_concurrent_jobs_per_owner=DELEGATIONS) as harness:
        expected = {}
        for n in range(DELEGATIONS):
            tool = CLAUDE if n % 2 else CODEX
            prompt = f"task {n} {uuid.uuid4().hex[:8]}"
            job_id = await start(harness, tool, prompt, setup.caller)
            expected[job_id] = ("codex says: " if tool == CODEX else "claude says: ") + prompt
            if n == 0:
                # Two cold Codex processes sharing one CODEX_HOME race on its sqlite state
                # (docs/dsh-tool-subagent.md); the first run bootstraps the home alone.
                await harness.jobs.wait(job_id, 120, setup.caller)
        nodes = set()
        for job_id, answer in expected.items():
            snapshot = await harness.jobs.wait(job_id, 200, setup.caller)
            assert snapshot.status is JobStatus.COMPLETED, (job_id, snapshot.detail)
            assert harness.jobs.read(job_id, setup.caller).strip() == answer
            nodes.add(ray_kit.where(snapshot))
        assert nodes == {node.node_id for node in ray_kit.workers}
    # Codex's key came from the worker nodes' environment, named by the profile.
    keys = {r.headers.get("authorization") for r in setup.codex.requests if r.task}
    assert keys == {f"Bearer {ray_kit.canary}"}


# ---- capacity ------------------------------------------------------------------------------


async def test_jobs_beyond_the_per_node_limit_are_queued_and_a_queued_kill_never_runs(
    setup: Any, ray_kit: Any
) -> None:
    async with setup.harness(max_runs_per_node=1) as harness:
        held = [await start(harness, CLAUDE, f"STALL {n}", setup.caller) for n in range(2)]
        await until(lambda: len(setup.claude.requests) >= 2, "both nodes to run a job")
        waiting = await start(harness, CLAUDE, "STALL queued", setup.caller)
        await asyncio.sleep(1.0)  # time enough for a wrongly free share to start it
        assert harness.jobs.get(waiting, setup.caller).status is JobStatus.QUEUED
        listed = (await job_list(harness, setup.caller)).text
        assert f"{waiting} [subagent] queued — ray job" in listed.splitlines()
        assert {harness.jobs.get(j, setup.caller).status for j in held} == {JobStatus.RUNNING}
        assert len(setup.claude.requests) == 2

        killed = await harness.tool("job_kill").call({"job_id": waiting}, setup.caller)
        # A queued job never started: its kill settles it at once.
        assert killed.text == f"stopped job {waiting} [status: killed]"
        snapshot = await harness.jobs.wait(waiting, 30, setup.caller)
        assert (snapshot.status, snapshot.where) == (JobStatus.KILLED, None)
        for job_id in held:
            harness.jobs.kill(job_id, setup.caller)
            assert (await harness.jobs.wait(job_id, 60, setup.caller)).status is JobStatus.KILLED
        assert all(r.task != "STALL queued" for r in setup.claude.requests)


# ---- kill mid-tool -------------------------------------------------------------------------


async def test_job_kill_mid_tool_leaves_no_marked_process_on_any_node(
    setup: Any, ray_kit: Any
) -> None:
    token = f"4{uuid.uuid4().int % 10**8:08d}.5"
    async with setup.harness() as harness:
        job_id = await start(harness, CODEX, f"HOLD {token}", setup.caller)
        await until(lambda: bool(sleeping(token)), "the tool's sleep to run on a worker node")
        assert ray_kit.cluster_marked(), "the product tree must be marked while it runs"
        result = await harness.tool("job_kill").call({"job_id": job_id}, setup.caller)
        # job_kill answers once the job has settled, its tree gone on its node.
        assert result.text == f"stopped job {job_id} [status: killed]"
        snapshot = await harness.jobs.wait(job_id, 60, setup.caller)
        assert snapshot.status is JobStatus.KILLED, snapshot
        # Settled only after whole-tree exit on its node: nothing is left at this moment.
        assert sleeping(token) == []
        assert ray_kit.cluster_marked() == []


def sleeping(token: str) -> list[int]:
    """Pids whose command line holds ``token`` (own walk of /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if token.encode() in cmdline and b"sleep" in cmdline and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


# ---- a worker node lost mid-run ------------------------------------------------------------


async def test_a_worker_node_removed_mid_run_fails_the_job_safely_and_leaves_nothing(
    setup: Any, ray_kit: Any
) -> None:
    dirs_before = set(ray_kit.lost_run_dirs())
    async with setup.harness() as harness:
        job_id = await start(harness, CLAUDE, "STALL lost node", setup.caller)
        await until(lambda: len(setup.claude.requests) >= 1, "the product to reach the model")
        node = ray_kit.worker_of(ray_kit.where(harness.jobs.get(job_id, setup.caller)))
        try:
            ray_kit.remove_worker(node)
            snapshot = await harness.jobs.wait(job_id, 90, setup.caller)
        finally:
            ray_kit.add_worker()
        assert snapshot.status is JobStatus.FAILED
        assert snapshot.detail == LOST
        output = await harness.tool("job_output").call({"job_id": job_id}, setup.caller)
        assert output.text == f"(no new output)\n[status: failed, {LOST}]"
        assert "ray" not in output.text.replace("executor: ray", "")
    await asyncio.to_thread(reap_orphans)
    ray_kit.assert_no_marked(settle_s=0.5)

    # Files too: Claude Code's run dir (``dsh-claude-<worker pid>-*``) is the spawn's owned dir,
    # so the supervisor, which outlives the SIGKILLed worker, removes it once the tree it killed
    # is gone; no later start has to sweep it (an unsupervised host's dir still needs the sweep:
    # tests-e2e/reliability/test_crash.py, "plain").
    def new_lost() -> list[Any]:
        return sorted(set(ray_kit.lost_run_dirs()) - dirs_before)

    try:
        await until(lambda: new_lost() == [], "the supervisor to remove the run dir", limit=10)
    finally:
        ray_kit.remove(new_lost())


# ---- credentials and workspaces -------------------------------------------------------------


async def test_the_canary_credential_never_passes_through_ray(
    setup: Any, ray_kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[bytes] = []
    submit = RayExecutor._submit
    new_actor = RayExecutor._new_actor

    def recording_submit(self: RayExecutor, actor: Any, work: PortableWork) -> Any:
        sent.append(pickle.dumps((work.target, dict(work.arguments))))
        return submit(self, actor, work)

    def recording_new_actor(self: RayExecutor) -> Any:
        sent.append(pickle.dumps(self.worker_setup))
        return new_actor(self)

    monkeypatch.setattr(RayExecutor, "_submit", recording_submit)
    monkeypatch.setattr(RayExecutor, "_new_actor", recording_new_actor)
    async with setup.harness() as harness:
        job_id = await start(harness, CODEX, "canary check", setup.caller)
        snapshot = await harness.jobs.wait(job_id, 120, setup.caller)
        assert snapshot.status is JobStatus.COMPLETED, snapshot
    (request,) = [r for r in setup.codex.requests if r.task == "canary check"]
    assert request.headers["authorization"] == f"Bearer {ray_kit.canary}"  # the key was used
    assert len(sent) == 2
    assert all(ray_kit.canary.encode() not in payload for payload in sent)
    # Each actor reaps its node's orphans when it starts (the setup its constructor receives).
    assert pickle.loads(sent[0]) == ("dsh.subprocess:reap_orphans",)
    arguments = pickle.loads(sent[1])[1]
    assert ray_kit.canary_env in json.dumps(arguments)  # named, never copied
    assert ray_kit.files_holding(ray_kit.canary.encode()) == []
    assert ray_kit.files_holding(ray_kit.token.encode()) == []


async def test_a_cwd_missing_on_the_worker_fails_before_anything_spawns(
    setup: Any, ray_kit: Any, tmp_path: Path
) -> None:
    missing = Caller(session_id="ray-tests", cwd=str(tmp_path / "not-on-the-worker"))
    async with setup.harness() as harness:
        job_id = await start(harness, CODEX, "no workspace", missing)
        snapshot = await harness.jobs.wait(job_id, 120, missing)
    assert snapshot.status is JobStatus.FAILED
    assert snapshot.detail == (
        "the job's working directory does not exist on the worker node (stage: executor); a"
        " job's cwd must be on a filesystem every node shares"
    )
    assert not [r for r in setup.codex.requests if r.task == "no workspace"]


async def test_a_job_with_an_output_schema_brings_its_checked_value_back(setup: Any) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    tools = [{"provider": "codex", "tool_name": "typed_codex", "output_schema": schema}]
    async with setup.harness(tools) as harness:
        job_id = await start(harness, "typed_codex", 'JSON {"n": 7}', setup.caller)
        snapshot = await harness.jobs.wait(job_id, 120, setup.caller)
        output = await harness.tool("job_output").call({"job_id": job_id}, setup.caller)
    assert snapshot.status is JobStatus.COMPLETED, snapshot
    assert snapshot.meta is not None
    assert snapshot.meta["structured_output"] == {"n": 7}  # checked on the worker, back on the host
    assert output.text == '{"n":7}\n[status: completed]'
    (request,) = [r for r in setup.codex.requests if (r.task or "").startswith("JSON")]
    assert request.body["text"]["format"]["schema"] == schema  # the schema reached the worker


@pytest.mark.parametrize(("failures", "connected"), [(3, True), (4, False)])
def test_a_ray_client_server_start_that_fails_is_asked_again_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch, failures: int, connected: bool
) -> None:
    """Ray's client proxy now and then loses the server process it starts for a new client, and
    the client's ``ray.init`` raises ``ConnectionAbortedError`` (seen in this suite's
    ``ray://`` test on a loaded machine). A scripted ``ray.init`` stands in for that proxy: the
    executor tries 4 times in all, then reports the cluster unavailable."""
    import ray

    from dsh.jobs import _ray_executor

    calls: list[str] = []

    def init(*, address: str, **_: Any) -> None:
        calls.append(address)
        if len(calls) <= failures:
            raise ConnectionAbortedError("Initialization failure from server")

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(_ray_executor, "CLIENT_INIT_PAUSE_S", 0.0)
    executor = RayExecutor(address="ray://127.0.0.1:1", max_runs_per_node=1)
    if connected:
        executor._init_ray()
    else:
        with pytest.raises(ConnectionAbortedError):
            executor._init_ray()
    assert calls == ["ray://127.0.0.1:1"] * min(failures + 1, _ray_executor.CLIENT_INIT_ATTEMPTS)


# ---- the host that submitted a job is lost ---------------------------------------------------

HOST = """
import asyncio, os, sys
from pathlib import Path
from dsh.tool_subagent import Caller, Harness

async def main() -> None:
    profile, workspace, id_file = sys.argv[1:4]
    prompt = os.environ["HOST_PROMPT"]  # not in the command line, where the walk looks
    harness = Harness.from_profile(profile)
    result = await harness.tool("subagent_codex").call(
        {"description": "host lost", "prompt": prompt, "run_in_background": True},
        Caller("ray-host", workspace),
    )
    Path(id_file).write_text(result.value["job_id"])
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_a_lost_host_s_ray_job_is_cancelled_on_its_node_and_reads_failed(
    setup: Any, ray_kit: Any, tmp_path: Path
) -> None:
    """The host that submitted a Ray job is SIGKILLed mid-run. Ray ends the dead driver's
    actors (they are not detached), so the job's run is cancelled on its node, its tree ends
    with its supervisor, and the job's record, kept by the host in the store, reads ``failed``
    with the fixed detail for anyone who looks afterwards."""
    store = tmp_path / "jobs.sqlite3"
    jobs = {"executor": "ray", "max_runs_per_node": setup.runs_per_node, "store": str(store)}
    profile = tmp_path / "profile.toml"
    profile.write_text(to_toml({**setup.profile, "jobs": jobs}), encoding="utf-8")
    token = f"5{uuid.uuid4().int % 10**8:08d}.5"
    id_file = tmp_path / "job-id"
    argv = [sys.executable, "-c", HOST, str(profile), str(setup.workspace), str(id_file)]
    env = {**ray_kit.driver_env(), "HOST_PROMPT": f"HOLD {token}"}
    host = await default_runtime().spawn(SpawnSpec(argv=argv, cwd=str(setup.workspace), env=env))
    try:
        # The product's tool runs on a node (an own walk of /proc finds it) before the kill.
        await until(lambda: bool(sleeping(token)), "the job's tool to run on a worker node", 120)
        job_id = id_file.read_text()
        os.kill(host.pid, signal.SIGKILL)
        await host.wait()
    finally:
        await host.aclose()
    # Ray cancels the dead driver's work: the tool's process ends on its node.
    await until(lambda: sleeping(token) == [], "the lost host's run to end on its node", 60)
    records = store_for(JobsConfig(store=str(store)))
    try:
        record = records.get(job_id)
        assert record is not None
        (read,) = records.correct([record])
        assert (read.status, read.detail) == (JobStatus.FAILED, HOLDER_GONE_DETAIL)
    finally:
        records.close()
    ray_kit.assert_no_marked(settle_s=5.0)
